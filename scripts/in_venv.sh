#!/usr/bin/env bash
# Runs a command inside the project's virtual environment, creating it and
# installing requirements.txt first when it is missing or out of date:
#   scripts/in_venv.sh python scripts/train_fashion.py
#   scripts/in_venv.sh python -m pytest tests
# PYTHON picks the interpreter that makes it (default python3.11, else python3); VENV the folder.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
want="$(sha256sum "$root/requirements.txt" | cut -d' ' -f1)"
stamp="$venv/.requirements.sha256"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # The interpreter matters only to make the venv (a ready one runs its own): PYTHON, else the venv's own when
  # requirements.txt changed, else python3.11 or python3.
  if [ -n "${PYTHON:-}" ]; then
    python="$PYTHON"
    if ! command -v "$python" >/dev/null 2>&1; then
      echo "in_venv.sh: error: PYTHON=$python is not an interpreter found here; set PYTHON to the path of a" \
           "Python 3.9-3.11 (python3.11, say), or leave it unset" >&2
      exit 1
    fi
  elif [ -x "$venv/bin/python" ]; then
    python="$venv/bin/python"
  else
    python=python3.11
    command -v "$python" >/dev/null 2>&1 || python=python3
  fi
  if ! "$python" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 11))'; then
    echo "in_venv.sh: error: TensorFlow 2.15 (the last release with tf.estimator) needs Python 3.9-3.11;" \
         "$python is $("$python" -V 2>&1). Set PYTHON=/path/to/python3.11." >&2
    exit 1
  fi
  echo "in_venv.sh: installing requirements.txt into $venv (a few minutes the first time)..." >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/requirements.txt"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
exec "$@"
