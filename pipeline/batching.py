"""The learning rate for a global batch, shared by every job."""

LR_SCALING_RULES = ("linear", "none")


def scaled_learning_rate(base_learning_rate, global_batch_size, reference_batch_size, rule="linear"):
    """Returns the learning rate for `global_batch_size`.

    'linear' scales the base rate, tuned at `reference_batch_size`, by
    global / reference (Goyal et al. 2017), so adding replicas keeps the step
    per example; 'none' returns the base rate unchanged.
    """
    if rule == "none":
        return base_learning_rate
    if rule == "linear":
        return base_learning_rate * global_batch_size / reference_batch_size
    raise ValueError(f"unknown learning-rate scaling rule {rule!r}; known: {', '.join(LR_SCALING_RULES)}")

