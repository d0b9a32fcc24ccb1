"""Keras model builders: each returns a compiled tf.keras model and does nothing else."""
