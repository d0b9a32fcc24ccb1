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



def batch_sizes_for_replicas(num_examples, batch_size, replicas):
    """Returns the sizes of an evaluation's batches over `num_examples` such that their number is a
    multiple of `replicas`, none empty and none over `batch_size`: a mirrored evaluation hands the
    batches round the replicas and stops at the first replica without one, so any other count would
    leave the last batches uncounted. Full batches first, the rest spread over the last ones."""
    full, rest = divmod(num_examples, batch_size)
    count = full + (rest > 0)
    target = -(-count // replicas) * replicas
    if target == count or num_examples < target:
        return [batch_size] * full + ([rest] if rest else [])
    tail_batches = target - full + (1 if rest == 0 else 0)  # the batches the tail is spread over
    kept = target - tail_batches
    tail = num_examples - kept * batch_size
    small, extra = divmod(tail, tail_batches)
    return [batch_size] * kept + [small + 1] * extra + [small] * (tail_batches - extra)
