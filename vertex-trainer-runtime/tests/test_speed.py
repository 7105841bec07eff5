"""vertex_trainer_runtime.speed: the interval arithmetic every trainer's speed lines rest on, on a
fake clock (its times are exact in binary, so are the figures)."""

from __future__ import annotations

import pytest

from vertex_trainer_runtime import speed


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_laps_and_the_run_count_steps_seconds_and_pauses_since_their_start():
    clock = FakeClock()
    timer = speed.IntervalTimer(clock)
    with timer.timing("checkpoint"):  # before the start: no interval's
        clock.now += 8.0
    timer.start(20)  # resumed after 20 steps: they are not this run's
    assert timer.mark == (108.0, 20, 8.0)
    clock.now += 2.0
    with timer.timing("checkpoint"):
        clock.now += 0.5
    lap = timer.lap(30)
    assert lap == speed.Interval(steps=10, seconds=2.5, paused=0.5)
    assert lap.without_pauses() == speed.Interval(10, 2.0)
    assert lap.per_second(lap.steps) == 4.0 and lap.seconds_per_step() == 0.25
    clock.now += 1.0
    with timer.timing("evaluation"):
        clock.now += 0.25
    assert timer.lap(40) == speed.Interval(10, 1.25, 0.25)
    assert timer.mark == (111.75, 40, 8.75)

    assert timer.since_start(40) == speed.Interval(20, 3.75, 0.75)
    assert timer.mark[1] == 40, "the run's figures leave the mark where it was"
    assert timer.seconds == {"checkpoint": 8.5, "evaluation": 0.25}
    assert timer.counts == {"checkpoint": 2, "evaluation": 1}


def test_a_timed_block_that_raises_still_counts_and_timed_functions_count_each_call():
    clock = FakeClock()
    timer = speed.IntervalTimer(clock)
    with pytest.raises(OSError), timer.timing("checkpoint"):
        clock.now += 3.0
        raise OSError("disk full")

    def evaluate(seconds: float) -> str:
        clock.now += seconds
        return "metrics"

    timed = timer.timed("evaluation", evaluate)
    assert timed(1.5) == "metrics" and timed(seconds=0.5) == "metrics"
    assert timer.seconds == {"checkpoint": 3.0, "evaluation": 2.0}
    assert timer.counts == {"checkpoint": 1, "evaluation": 2}
    assert timer.paused_total == 5.0


def test_empty_intervals_give_zero_rates_not_a_division_error():
    assert speed.Interval(0, 0.0).per_second(0) == 0.0
    assert speed.Interval(0, 2.0).seconds_per_step() == 0.0
    assert speed.Interval(3, 0.0).per_second(96) == 0.0
    total = speed.Interval(2, 0.5, 0.25) + speed.Interval(6, 1.5)
    assert total == speed.Interval(8, 2.0, 0.25)
    assert total.per_second(32 * total.steps) == 128.0


def test_the_clock_is_read_at_the_marks_and_around_pauses_only():
    """No read per step: a trainer's steps between two marks cost the timer nothing."""
    clock = FakeClock()
    timer = speed.IntervalTimer(clock)
    assert clock.reads == 0 and timer.mark is None
    timer.start(0)
    timer.lap(1000)
    with timer.timing("checkpoint"):
        pass
    timer.since_start(1000)
    assert clock.reads == 5


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),  # torch.cuda.get_device_name
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA A100-SXM4-40GB", 312.0),  # TensorFlow's device_name detail
        ("Tesla T4", 65.0),
        ("NVIDIA L40S", None),  # not an L4
    ],
)
def test_every_frameworks_mfu_divides_by_the_gpus_peak_by_its_name(name, peak):
    assert speed.peak_tflops(name) == peak
