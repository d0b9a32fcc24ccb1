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
    leave the last batches uncounted. Full batches first, then what is left, at least one example
    in each of the last ones."""
    count = -(-num_examples // batch_size)
    target = -(-count // replicas) * replicas
    if num_examples < target:  # too few examples to give every replica a batch: as they come
        return [batch_size] * (num_examples // batch_size) + ([num_examples % batch_size] if num_examples % batch_size
                                                                else [])
    sizes, left = [], num_examples
    for i in range(target):
        sizes.append(min(batch_size, left - (target - i - 1)))  # full while the rest can still give one each
        left -= sizes[-1]
    return sizes
