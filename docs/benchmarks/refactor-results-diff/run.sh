#!/bin/bash
# one Fashion sample run at the commit checked out in $1, results into $2
cd $1 && VENV=/work/main/.venv scripts/in_venv.sh python scripts/train_fashion.py --max-steps 30 --deterministic --seed 1 --eval-every-steps 10 --patience 5 --model-dir $2 > $2.log 2>&1
echo "exit $?" >> $2.log
