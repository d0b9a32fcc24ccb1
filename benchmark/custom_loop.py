"""The benchmark's reference engines outside the Estimator: a custom training loop (a tf.function
step run with strategy.run over a distributed dataset, the TF 2 tutorials' way) and the limit:
the same step run many times inside one tf.function on one batch held in memory, with no input
pipeline and no per-step call, the fastest this model's step runs here."""
import time

import tensorflow as tf

from benchmark.timing import step_figures

# The limit's steps per tf.function call: each call's fixed cost (a Python call, the loop's
# set-up, one loss read back) is spread over this many steps.
LIMIT_STEPS_PER_CALL = 10


def _replica_step(model, global_batch):
    """Returns the function training `model` one step on one replica's (features, labels); it
    returns that replica's share of the global batch's mean loss."""
    optimizer = model.optimizer
    loss_scaled = isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            probabilities = model(features, training=True)
            # Each replica's share of the global batch's mean loss, as the Estimator computes it.
            loss = tf.reduce_sum(tf.keras.losses.categorical_crossentropy(labels, probabilities)) / global_batch
            scaled = optimizer.get_scaled_loss(loss) if loss_scaled else loss
        gradients = tape.gradient(scaled, model.trainable_variables)
        if loss_scaled:
            gradients = optimizer.get_unscaled_gradients(gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return replica_step


def _train_step(model, strategy, global_batch, xla=False):
    """Returns a tf.function (XLA-compiled with `xla`) running one step of `model` on each
    replica's (features, labels); it returns the global batch's mean loss."""
    replica_step = _replica_step(model, global_batch)

    @tf.function(jit_compile=xla or None)
    def step(features, labels):
        losses = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def _train_loop(model, strategy, global_batch, xla=False):
    """Returns a tf.function (XLA-compiled with `xla`) running `steps` steps of `model` on the same
    (features, labels) in one graph loop; it returns the last step's mean loss."""
    replica_step = _replica_step(model, global_batch)

    @tf.function(jit_compile=xla or None)
    def loop(features, labels, steps):
        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            losses = strategy.run(replica_step, args=(features, labels))
            loss = strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
        return loss

    return loop


def _build(task, task_args, plan, batch_size):
    """Returns (strategy, global batch, the compiled model, the distributed training dataset)."""
    global_batch = batch_size * plan.replicas
    strategy = plan.strategy or tf.distribute.get_strategy()
    data = task.prepare_data(task_args, global_batch)
    with strategy.scope():
        model = task.build_model(task_args, task_args.learning_rate)
    return strategy, global_batch, model, strategy.experimental_distribute_dataset(data.train_input_fn())


def measure_custom_loop(task, task_args, plan, batch_size, warm_up_steps, timed_steps):
    """Returns (throughput figures, seconds) of a custom loop with the task's model, optimizer,
    input_fn and global batch: one tf.function call per step, its loss read back (a sync)."""
    strategy, global_batch, model, dataset = _build(task, task_args, plan, batch_size)
    step = _train_step(model, strategy, global_batch, task_args.xla)
    iterator = iter(dataset)
    step_times, cpu_times = [], []
    start = span_start = time.perf_counter()
    for i in range(warm_up_steps + timed_steps):
        wall, cpu = time.perf_counter(), time.process_time()
        if i == warm_up_steps:
            span_start = wall
        float(step(*next(iterator)))  # waits for the step to finish
        if i >= warm_up_steps:
            step_times.append(time.perf_counter() - wall)
            cpu_times.append(time.process_time() - cpu)
    figures = step_figures(step_times, global_batch, cpu_times, span_start, time.perf_counter())
    return figures, time.perf_counter() - start


def measure_limit(task, task_args, plan, batch_size, warm_up_steps, timed_steps):
    """Returns (throughput figures, seconds) of the limit: the custom loop's step on the input's first
    batch, kept in memory, run LIMIT_STEPS_PER_CALL times per tf.function call in a graph loop.

    A call's time is shared equally by its steps, so the spread (images_per_sec_std)
    is between calls; `timed_steps` is rounded up to whole calls.
    """
    strategy, global_batch, model, dataset = _build(task, task_args, plan, batch_size)
    iterator = iter(dataset)
    features, labels = next(iterator)
    del iterator  # no input pipeline runs beside the timed steps
    loop = _train_loop(model, strategy, global_batch, task_args.xla)
    per_call = min(LIMIT_STEPS_PER_CALL, timed_steps)
    start = time.perf_counter()
    float(loop(features, labels, tf.constant(max(warm_up_steps, 1))))  # traces, then the warm-up steps
    step_times, cpu_times = [], []
    span_start = time.perf_counter()
    for _ in range(-(-timed_steps // per_call)):
        wall, cpu = time.perf_counter(), time.process_time()
        float(loop(features, labels, tf.constant(per_call)))  # waits for the call's last step
        step_times += [(time.perf_counter() - wall) / per_call] * per_call
        cpu_times += [(time.process_time() - cpu) / per_call] * per_call
    figures = step_figures(step_times, global_batch, cpu_times, span_start, time.perf_counter())
    return figures, time.perf_counter() - start
