"""Validation during training, in one place: the split held out of the training data (split), when
an evaluation is due (cadence), the evaluation and its record (listener, record), keeping the best
model (best), early stopping, which reads the record as Keras' EarlyStopping reads `logs`
(early_stopping), the stop every trainer of a cluster agrees on (agreed_stop), and the flags and the
checks made of them (flags, checks).

This package's __init__ imports nothing, so that the flags module stays free of TensorFlow.
"""
