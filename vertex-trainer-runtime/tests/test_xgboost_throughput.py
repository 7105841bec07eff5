"""The speed figures the chief logs: rounds/s, rows/s, time per round, checkpoint and eval time."""

from __future__ import annotations

import pytest

pytest.importorskip("xgboost")

from vertex_trainer_runtime.xgboost import throughput  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_intervals_and_totals_count_only_this_runs_rounds():
    clock = FakeClock()
    speed = throughput.Throughput(rows=1000, clock=clock)
    speed.start(20)  # resumed after 20 rounds: they are not this run's
    clock.now += 2.0  # rounds 21-30 in 2 s, a checkpoint of 0.5 s among them
    with speed.timing("checkpoint"):
        clock.now += 0.5
    first = speed.mark[1] + 1
    figures = speed.interval(30)
    assert first == 21
    assert figures["rounds_per_second"] == pytest.approx(10 / 2.5)
    assert figures["rows_per_second"] == pytest.approx(1000 * 10 / 2.5)
    assert figures["seconds_per_round"] == pytest.approx(0.25)
    clock.now += 1.0  # rounds 31-40 in 1 s, an evaluation of 0.25 s among them
    with speed.timing("evaluation"):
        clock.now += 0.25
    assert speed.interval(40)["seconds_per_round"] == pytest.approx(0.125)

    totals = speed.totals(40)
    assert totals["rounds_per_second"] == pytest.approx(20 / 3.75)
    assert totals["checkpoint_seconds"] == pytest.approx(0.5)
    assert totals["evaluation_seconds"] == pytest.approx(0.25)
    assert speed.counts == {"checkpoint": 1, "evaluation": 1}


def test_a_timed_block_that_raises_still_counts():
    clock = FakeClock()
    speed = throughput.Throughput(rows=10, clock=clock)
    with pytest.raises(OSError), speed.timing("checkpoint"):
        clock.now += 3.0
        raise OSError("disk full")
    assert speed.seconds["checkpoint"] == pytest.approx(3.0)


def test_no_rounds_gives_zero_rates_not_a_division_error():
    speed = throughput.Throughput(rows=10, clock=FakeClock())
    speed.start(5)
    assert speed.totals(5)["rounds_per_second"] == 0.0
    assert speed.totals(5)["seconds_per_round"] == 0.0
