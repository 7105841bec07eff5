"""``vertex_trainer_runtime.keras.throughput``: the examples/s and step time of the training
steps alone, the first step (tracing), checkpoints and evaluation left out (a fake clock)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from vertex_trainer_runtime.keras import throughput  # noqa: E402


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throughput_leaves_out_the_first_step_checkpoints_and_evaluation():
    clock = Clock()
    timings = throughput.Timings(clock)
    speed = throughput.Throughput(global_batch=32, every_steps=2, timings=timings)
    speed.set_model(SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(10))))

    def step(seconds: float) -> None:
        clock.now += seconds
        speed.on_train_batch_end(0)

    speed.on_train_begin()
    speed.on_epoch_begin(0)
    step(5.0)  # tracing: left out
    step(0.1)
    step(0.1)  # step 13: the first report
    with timings.timing(throughput.CHECKPOINT):
        clock.now += 1.0
    with timings.timing(throughput.EVALUATION):
        clock.now += 2.0
    step(0.1)
    step(0.1)  # step 15: 0.2 s of steps, 3 s of checkpoint and evaluation
    step(0.1)
    logs = {}
    speed.on_epoch_end(0, logs)  # step 16: the rest of the epoch

    assert speed.step == 16
    assert [report["step_time_seconds"] for report in speed.reports] == pytest.approx([0.1] * 3)
    assert [report["examples_per_second"] for report in speed.reports] == pytest.approx([320] * 3)
    assert logs == pytest.approx({"examples_per_second": 320.0, "step_time_seconds": 0.1})
    assert speed.summary() == pytest.approx(
        {
            "training_seconds": 5.5,
            "checkpoint_seconds": 1.0,
            "evaluation_seconds": 2.0,
            "examples_per_second": 320.0,
        }
    )
