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


def _profiler(model_dir, profile_steps=100, **_):
    from hooks.profiler import DeferredProfilerHook
    return DeferredProfilerHook(save_steps=profile_steps, output_dir=model_dir)


HOOKS = {
    "examples_per_second": _examples_per_second,
    "profiler": _profiler,
}


def build_hooks(names, **params):
    """Returns a list of hooks, one per name in `names`, built from `params`.

    Raises ValueError for an unknown name, listing the known ones.
    """
    unknown = [n for n in names if n not in HOOKS]
    if unknown:
        raise ValueError(f"unknown hook {', '.join(unknown)}; known hooks: {', '.join(sorted(HOOKS))}")
    return [HOOKS[name](**params) for name in names]
