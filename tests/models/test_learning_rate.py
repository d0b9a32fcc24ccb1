"""The learning-rate schedule is a function of the images trained, so a resume with another batch
goes on where it stood."""
import pytest
import tensorflow as tf

from models.learning_rate import ScheduledRate


@pytest.mark.parametrize("kind", ["cosine", "step"])
def test_a_resume_with_another_batch_continues_the_schedule(kind):
    straight = ScheduledRate(0.1, 1600, kind, warm_up_images=160, images_per_step=32)
    # Stopped at step 23 (736 images), resumed with a global batch of 64.
    resumed = ScheduledRate(0.1, 1600, kind, warm_up_images=160, images_per_step=64, start_step=23,
                            images_at_start=736)
    assert float(resumed(23)) == pytest.approx(float(straight(23)), rel=1e-6)
    assert float(resumed(24)) == pytest.approx(float(straight(25)), rel=1e-6)  # 800 images
    assert float(resumed(35)) == pytest.approx(float(straight(47)), rel=1e-6)  # 1,504 images


def test_warm_up_then_cosine_in_images():
    rate = ScheduledRate(0.01, 800, "cosine", warm_up_images=160, images_per_step=16)
    assert float(rate(0)) == pytest.approx(0.001, rel=1e-6)  # one step's images of the warm-up's 160
    assert float(rate(9)) == pytest.approx(0.01, rel=1e-6)
    assert float(rate(30)) == pytest.approx(0.005, rel=1e-6)  # 480 images: half-way through the decay
    assert rate.step_at(800) == 50
    assert "cosine decay to 0 at 800 images (step 50)" in rate.describe()


def test_step_decay_falls_tenfold_at_half_and_three_quarters():
    rate = ScheduledRate(1.0, 1000, "step", images_per_step=10)
    assert [float(rate(s)) for s in (49, 50, 74, 75)] == pytest.approx([1.0, 0.1, 0.1, 0.01])
    assert rate.describe() == "x0.1 at steps 50, 75"


def test_the_rate_survives_serialisation():
    rate = ScheduledRate(0.1, 1600, "cosine", 160, 64, 23, 736)
    copy = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(rate))
    assert copy.get_config() == rate.get_config()
