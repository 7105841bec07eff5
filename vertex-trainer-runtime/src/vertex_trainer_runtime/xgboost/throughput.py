"""Training speed in the chief's log, with each metric report and at the end of the run.
The runtime's (``vertex_trainer_runtime.xgboost``): rounds/s, rows/s, ms per round, seconds
spent in checkpoints and evaluation; two clock reads per interval, none per round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from vertex_trainer_runtime import ledger, speed

logger = logging.getLogger(__name__)


class Throughput(speed.IntervalTimer):
    """Rounds timed since the last interval, and the seconds spent checkpointing and evaluating
    (``timing("checkpoint")``, ``timing("evaluation")``): reported beside the rounds' time, which
    includes them.

    ``rows`` is the number of training rows of all replicas: one boosting round passes over all
    of them, so rows/s is rows x rounds/s.
    """

    def __init__(self, rows: int, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self.rows = rows
        ledger.record("work", rows=rows)  # make report: rows x rounds per second (no MFU)
        self.start(0)

    @property
    def first_round(self) -> int:
        """The rounds done before boosting started (a resumed run's checkpoint's)."""
        return self.first_step

    def interval(self, rounds: int) -> dict[str, float]:
        """The speed since the previous call (or the start), ending after round ``rounds``."""
        return self._figures(self.lap(rounds))

    def totals(self, rounds: int) -> dict[str, float]:
        """The whole run's speed and the time spent in checkpoints and evaluation."""
        figures = self._figures(self.since_start(rounds))
        figures["checkpoint_seconds"] = self.seconds["checkpoint"]
        figures["evaluation_seconds"] = self.seconds["evaluation"]
        return figures

    def _figures(self, interval: speed.Interval) -> dict[str, float]:
        per_second = interval.per_second(interval.steps)
        return {
            "rounds_per_second": per_second,
            "rows_per_second": per_second * self.rows,
            "seconds_per_round": interval.seconds_per_step(),
        }


def log_interval(first: int, last: int, figures: dict[str, float]) -> None:
    """One line per logging interval (the chief's)."""
    logger.info("Speed, rounds %d-%d: %s", first, last, _speed(figures))


def log_totals(speed: Throughput, rounds: int, figures: dict[str, float]) -> None:
    """The run's last speed line: the whole run, and where time went besides boosting."""
    seconds, counts = speed.seconds, speed.counts
    logger.info(
        f"Speed, rounds {speed.first_round + 1}-{rounds}: {_speed(figures)}; "
        f"checkpoints {seconds['checkpoint']:.2f} s ({counts['checkpoint']}), "
        f"evaluation {seconds['evaluation']:.2f} s ({counts['evaluation']})"
    )


def _speed(figures: dict[str, float]) -> str:
    per_round_ms = figures["seconds_per_round"] * 1000
    rounds, rows = figures["rounds_per_second"], figures["rows_per_second"]
    return f"{rounds:.1f} rounds/s, {rows:.3g} rows/s, {per_round_ms:.2f} ms per round"
