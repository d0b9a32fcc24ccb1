"""The benchmark's reference engines outside the Estimator: a custom training loop (a tf.function
step run with strategy.run over a distributed dataset, the TF 2 tutorials' way) and the same step
on one batch held in memory, the fastest this model trains here: the limit."""
import time

import tensorflow as tf

from hooks.examples_per_second import throughput


def _train_step(model, strategy, global_batch, xla=False):
    """Returns a tf.function (XLA-compiled with `xla`) running one step of `model` on each
    replica's (features, labels)."""
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

    @tf.function(jit_compile=xla or None)
    def step(features, labels):
        losses = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def measure_custom_loop(task, task_args, plan, batch_size, warm_up_steps, timed_steps, one_batch=False):
    """Returns (throughput figures, seconds) of a custom loop with the task's model, optimizer,
    input_fn and global batch; with `one_batch`, every step trains on the first batch again."""
    global_batch = batch_size * plan.replicas
    strategy = plan.strategy or tf.distribute.get_strategy()
    data = task.prepare_data(task_args, global_batch)
    with strategy.scope():
        model = task.build_model(task_args, task_args.learning_rate)
    step = _train_step(model, strategy, global_batch, task_args.xla)
    iterator = iter(strategy.experimental_distribute_dataset(data.train_input_fn()))
    batch = next(iterator)
    step_times, cpu_times = [], []
    start = time.perf_counter()
    for i in range(warm_up_steps + timed_steps):
        wall, cpu = time.perf_counter(), time.process_time()
        features, labels = batch if one_batch else next(iterator)
        float(step(features, labels))  # waits for the step to finish
        if i >= warm_up_steps:
            step_times.append(time.perf_counter() - wall)
            cpu_times.append(time.process_time() - cpu)
    return throughput(step_times, global_batch, cpu_times), time.perf_counter() - start
