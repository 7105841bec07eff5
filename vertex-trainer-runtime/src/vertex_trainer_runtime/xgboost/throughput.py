"""Training speed in the chief's log, with each metric report and at the end of the run.
The runtime's (``vertex_trainer_runtime.xgboost``): rounds/s, rows/s, ms per round, seconds
spent in checkpoints and evaluation; two clock reads per interval, none per round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


class Throughput:
    """Rounds timed since the last interval, and the seconds spent checkpointing and evaluating.

    ``rows`` is the number of training rows of all replicas: one boosting round passes over all
    of them, so rows/s is rows x rounds/s.
    """

    def __init__(self, rows: int, clock: Callable[[], float] = time.monotonic):
        self.rows = rows
        self._clock = clock
        self.started = clock()
        self.first_round = 0
        self.mark = (self.started, 0)  # (time, rounds done) when the interval began
        self.seconds = {"checkpoint": 0.0, "evaluation": 0.0}
        self.counts = {"checkpoint": 0, "evaluation": 0}

    def start(self, rounds: int) -> None:
        """Boosting starts with ``rounds`` already done (a resumed run: its checkpoint's)."""
        self.started = self._clock()
        self.first_round = rounds
        self.mark = (self.started, rounds)

    @contextmanager
    def timing(self, what: str) -> Iterator[None]:
        """Add the time of the block to ``what`` (``checkpoint`` or ``evaluation``)."""
        began = self._clock()
        try:
            yield
        finally:
            self.seconds[what] += self._clock() - began
            self.counts[what] += 1

    def interval(self, rounds: int) -> dict[str, float]:
        """The speed since the previous call (or the start), ending after round ``rounds``."""
        now = self._clock()
        since, done = self.mark
        self.mark = (now, rounds)
        return self._figures(rounds - done, now - since)

    def totals(self, rounds: int) -> dict[str, float]:
        """The whole run's speed and the time spent in checkpoints and evaluation."""
        figures = self._figures(rounds - self.first_round, self._clock() - self.started)
        figures["checkpoint_seconds"] = self.seconds["checkpoint"]
        figures["evaluation_seconds"] = self.seconds["evaluation"]
        return figures

    def _figures(self, rounds: int, seconds: float) -> dict[str, float]:
        per_second = rounds / seconds if seconds > 0 else 0.0
        return {
            "rounds_per_second": per_second,
            "rows_per_second": per_second * self.rows,
            "seconds_per_round": seconds / rounds if rounds else 0.0,
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
