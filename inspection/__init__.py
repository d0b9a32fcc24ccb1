"""Tools that show what a job's input pipeline feeds the model, before hours of training."""
