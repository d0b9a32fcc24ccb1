"""tf.data input functions for Estimators: they build datasets and nothing else."""
