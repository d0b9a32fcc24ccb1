"""SessionRunHooks, and the registry that builds them by name (as in tensorflow/models).

`build_hooks(["examples_per_second", "profiler"], model_dir=..., ...)` returns
the hooks in the order named; each builder takes the keyword arguments it needs.
The builders import their hook's module when called, so that command lines can
list the names without importing TensorFlow.
"""


def _examples_per_second(global_batch_size, model_dir=None, every_n_steps=100, warm_up_steps=10,
                         excluded_time=None, **_):
    from hooks.examples_per_second import ExamplesPerSecondHook
    return ExamplesPerSecondHook(global_batch_size, every_n_steps=every_n_steps,
                                 warm_up_steps=warm_up_steps, output_dir=model_dir, excluded_time=excluded_time)


def _profiler(model_dir=None, profile_steps=100, **_):
    if model_dir is None:  # a task that writes no files (a cluster's worker: the chief's timelines stand for it)
        return None
    from hooks.profiler import DeferredProfilerHook
    return DeferredProfilerHook(save_steps=profile_steps, output_dir=model_dir)


HOOKS = {
    "examples_per_second": _examples_per_second,
    "profiler": _profiler,
}


def build_hooks(names, **params):
    """Returns a list of hooks, one per name in `names`, built from `params` (with `model_dir` None, the hooks
    that only write files are left out, and the others write no summaries).

    Raises ValueError for an unknown name, listing the known ones.
    """
    unknown = [n for n in names if n not in HOOKS]
    if unknown:
        raise ValueError(f"unknown hook {', '.join(unknown)}; known hooks: {', '.join(sorted(HOOKS))}")
    return [hook for hook in (HOOKS[name](**params) for name in names) if hook is not None]
