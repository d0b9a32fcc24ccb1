"""Wires input_fns, models and hooks into Estimators: flags, strategy, RunConfig, the run loop."""
