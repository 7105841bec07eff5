"""The speed figures the chief logs: rounds/s, rows/s, time per round (checkpoints and evaluation
included, their seconds reported beside). The arithmetic: test_speed.py."""

from __future__ import annotations

import pytest

pytest.importorskip("xgboost")

from vertex_trainer_runtime.xgboost import throughput  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_intervals_and_totals_count_only_this_runs_rounds_and_name_them(caplog):
    clock = FakeClock()
    speed = throughput.Throughput(rows=1000, clock=clock)
    speed.start(20)  # resumed after 20 rounds: they are not this run's
    clock.now += 2.0  # rounds 21-30 in 2 s, a checkpoint of 0.5 s among them
    with speed.timing("checkpoint"):
        clock.now += 0.5
    first = speed.mark[1] + 1
    figures = speed.interval(30)
    assert first == 21
    assert figures == {"rounds_per_second": 4.0, "rows_per_second": 4e3, "seconds_per_round": 0.25}
    clock.now += 1.0  # rounds 31-40 in 1 s, an evaluation of 0.25 s among them
    with speed.timing("evaluation"):
        clock.now += 0.25
    assert speed.interval(40)["seconds_per_round"] == 0.125

    caplog.set_level("INFO", logger=throughput.__name__)
    throughput.log_totals(speed, 40, speed.totals(40))
    assert caplog.messages == [
        "Speed, rounds 21-40: 5.3 rounds/s, 5.33e+03 rows/s, 187.50 ms per round; "
        "checkpoints 0.50 s (1), evaluation 0.25 s (1)"
    ]
