"""Data acquisition: getting a dataset onto disk and saying what is there.

Downloads (Fashion-MNIST's IDX files over HTTP, the Kermany OCT archive from Kaggle with a stall
watchdog), the dataset checks that find and verify a tree on disk, locks and atomic writes, and the
one versioned shard-and-manifest system every job's prepared TFRecords go through (shards.py).

Imports flow one way: pipeline -> input_fns -> acquisition. This room imports neither input_fns
nor pipeline: input_fns builds tf.data pipelines from what acquisition put on disk (its record
format, its manifests, its locks); the jobs in pipeline/tasks compose the two (e.g. decoding
images with input_fns to write them as shards here).
"""
