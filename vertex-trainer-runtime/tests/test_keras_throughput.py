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


def test_reports_reach_tensorboard_at_their_steps_across_a_resume(tmp_path):
    """As a trainer run and its resume write them (one log dir): 4 steps reporting every 50 (one
    report, at the epoch's end), then, resumed at step 4, every step (step 5, tracing, left out):
    each figure at steps 4, 6, 7 and 8, and each run's totals."""
    for first_step, every_steps in ((0, 50), (4, 1)):
        clock = Clock()
        speed = throughput.Throughput(16, every_steps, throughput.Timings(clock), str(tmp_path))
        optimizer = SimpleNamespace(iterations=tf.Variable(first_step))
        speed.set_model(SimpleNamespace(optimizer=optimizer))
        speed.on_train_begin()
        speed.on_epoch_begin(0)
        for _ in range(4):
            clock.now += 0.1
            speed.on_train_batch_end(0)
        speed.on_epoch_end(0, {})
        speed.on_train_end()
        speed.log_summary()
    seen = {}  # tag -> steps, over both runs' event files
    for events in (tmp_path / "throughput").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                seen.setdefault(value.tag, []).append(event.step)
    assert sorted(seen["examples_per_second"]) == sorted(seen["step_time_seconds"]) == [4, 6, 7, 8]
    assert sorted(seen["total_checkpoint_seconds"]) == sorted(seen["total_evaluation_seconds"])
    assert sorted(seen["total_evaluation_seconds"]) == [4, 8]
