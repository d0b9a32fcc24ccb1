"""Reports beside the run loop: the clinical figures of a test evaluation (clinical.py, pure
NumPy), their bootstrap intervals (bootstrap.py), and the files and plots that carry them
(files.py). Nothing here imports TensorFlow; pipeline/test_report.py wires it to an evaluation."""
