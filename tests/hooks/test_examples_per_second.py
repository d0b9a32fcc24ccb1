import glob

import pytest
import tensorflow as tf

import hooks
from hooks.examples_per_second import ExamplesPerSecondHook, throughput
from hooks.profiler import DeferredProfilerHook


class FakeClock:
    """Returns the next of the given instants at each call."""

    def __init__(self, step_seconds):
        self.instants = []
        t = 0.0
        for seconds in step_seconds:
            self.instants += [t, t + seconds]
            t += seconds + 0.5  # time between steps (other hooks, checkpoints) is never counted
        self.instants.reverse()

    def __call__(self):
        return self.instants.pop()


class Values:
    results = 41


def run_steps(hook, n):
    for _ in range(n):
        hook.before_run(None)
        hook.after_run(None, Values())


def test_warm_up_steps_are_skipped_and_the_global_batch_is_used():
    # Two slow warm-up steps, then four steps of 0.5 s with 2 replicas x 32 images.
    hook = ExamplesPerSecondHook(global_batch_size=64, warm_up_steps=2, every_n_steps=100,
                                 clock=FakeClock([10.0, 5.0, 0.5, 0.5, 0.5, 0.5]),
                                 cpu_clock=FakeClock([20.0, 9.0, 0.8, 0.8, 0.8, 0.8]))
    run_steps(hook, 6)
    assert hook.step_times == [0.5, 0.5, 0.5, 0.5]
    assert hook.cpu_times == pytest.approx([0.8, 0.8, 0.8, 0.8])
    summary = hook.summary()
    assert summary["images_per_sec"] == pytest.approx(128.0)  # 64 images / 0.5 s, not divided by replicas
    assert summary["images_per_sec_std"] == pytest.approx(0.0)
    assert summary["timed_steps"] == 4 and summary["timed_seconds"] == pytest.approx(2.0)
    assert summary["cpu_seconds_per_image"] == pytest.approx(3.2 / 256)


def test_throughput_is_total_images_over_total_time_with_the_spread_of_step_rates():
    figures = throughput([0.25, 0.5], global_batch_size=100)
    assert figures["images_per_sec"] == pytest.approx(200 / 0.75)
    assert figures["images_per_sec_std"] == pytest.approx(100.0)  # rates 400 and 200
    assert figures["step_time_min"] == 0.25 and figures["step_time_max"] == 0.5


def test_no_summary_before_the_warm_up_is_over():
    hook = ExamplesPerSecondHook(global_batch_size=8, warm_up_steps=3, clock=FakeClock([1.0] * 3))
    run_steps(hook, 3)
    assert hook.summary() is None


def test_it_logs_and_writes_tensorboard_summaries_in_a_real_session(tmp_path, caplog):
    caplog.set_level("DEBUG")  # the window lines; a person reads the speed in hooks.progress's lines
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(global_step, 1)
        hook = ExamplesPerSecondHook(global_batch_size=16, every_n_steps=3, warm_up_steps=1,
                                     output_dir=str(tmp_path))
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(8):
                session.run(train_op)
    assert len(hook.step_times) == 7
    # Windows of 3 timed steps end at steps 4 and 7; the last, partial one at step 8.
    assert "images/sec" in caplog.text
    reports = [r.getMessage() for r in caplog.records if r.name == "hooks.examples_per_second"]
    assert [line.split(":")[0] for line in reports] == ["step 4", "step 7", "step 8"]
    values = [(e.step, v.simple_value)
              for path in glob.glob(str(tmp_path / "events.out.tfevents.*"))
              for e in tf.compat.v1.train.summary_iterator(path)
              for v in e.summary.value if v.tag == "images_per_sec"]
    assert [step for step, _ in values] == [4, 7, 8]
    assert all(value > 0 for _, value in values)


def test_hooks_are_built_by_name():
    built = hooks.build_hooks(["examples_per_second", "profiler"], global_batch_size=32, model_dir="/tmp/m")
    assert isinstance(built[0], ExamplesPerSecondHook) and built[0].global_batch_size == 32
    assert isinstance(built[1], DeferredProfilerHook)
    with pytest.raises(ValueError, match="unknown hook nope; known hooks: examples_per_second, profiler"):
        hooks.build_hooks(["nope"], global_batch_size=32)


class GrowingSeconds:
    """An excluded_time source: another hook spends `per_step[i]` seconds during step i."""

    def __init__(self):
        self.seconds = 0.0


def test_time_spent_writing_checkpoints_during_a_step_is_left_out():
    excluded = GrowingSeconds()
    hook = ExamplesPerSecondHook(global_batch_size=10, warm_up_steps=0, every_n_steps=100, excluded_time=excluded,
                                 clock=FakeClock([0.5, 2.5, 0.5]), cpu_clock=FakeClock([0.5, 2.5, 0.5]))
    for checkpoint_seconds in (0.0, 2.0, 0.0):  # the second step's window holds a 2 s checkpoint write
        hook.before_run(None)
        excluded.seconds += checkpoint_seconds
        hook.after_run(None, Values())
    assert hook.step_times == pytest.approx([0.5, 0.5, 0.5])


@pytest.mark.parametrize("writes_summaries", [True, False])
def test_a_cluster_worker_s_hooks_write_nothing_into_the_chief_s_model_dir(writes_summaries):
    """Every worker's images_per_sec went into the chief's event folder (one TensorBoard series interleaved from N
    processes), and under --hooks profiler each wrote the chief's timeline-<step>.json at the same steps."""
    from types import SimpleNamespace
    from hooks.stop import StopOnRequestHook
    from pipeline.training_hooks import build_training_hooks
    settings = SimpleNamespace(hooks=("examples_per_second", "profiler"), model_dir="/tmp/m", summary_steps=10,
                               warm_up_steps=2, log_steps=10)
    built = build_training_hooks(SimpleNamespace(settings=settings, global_batch=32, max_steps=100),
                                 StopOnRequestHook(lambda: False), writes_summaries=writes_summaries)
    speed = [hook for hook in built.all if isinstance(hook, ExamplesPerSecondHook)]
    profilers = [hook for hook in built.all if isinstance(hook, DeferredProfilerHook)]
    assert len(speed) == 1 and speed[0].output_dir == ("/tmp/m" if writes_summaries else None)
    assert len(profilers) == (1 if writes_summaries else 0)
    assert built.rate.output_dir == ("/tmp/m" if writes_summaries else None)
