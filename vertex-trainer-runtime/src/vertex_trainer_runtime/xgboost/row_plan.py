"""Which global rows each replica of a distributed job reads, and which are held out for eval.
The runtime's (``vertex_trainer_runtime.xgboost``): it only numbers rows; the trainer's
``data.py`` reads them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vertex_trainer_runtime.cli import InputError


def plan(total: int, hold_out: float, seed: int) -> RowPlan:
    """The plan of ``total`` rows; an ``InputError`` when too few to hold some out."""
    if hold_out > 0 and total < 2:
        raise InputError("no --eval-data given and too few training rows to hold some out")
    return RowPlan(total, hold_out, seed)


class RowPlan:
    """Which global rows each replica reads and which are held out for evaluation.

    Row ``i`` is held out when a seeded hash of ``i`` falls below ``hold_out`` (if that holds
    out no row, the row of the smallest hash is; if all, the row of the largest stays), so the
    eval rows depend on the data, ``--seed`` and ``--eval-fraction`` only. The replicas' ranges
    split the other rows evenly. The hashes are computed in chunks: memory stays small and two
    passes over N row numbers cost about 20 ms per million rows.
    """

    def __init__(self, total: int, hold_out: float, seed: int):
        self.total = total
        self.hold_out = hold_out
        self.seed = seed
        self.forced_in: int | None = None  # a row held out although its hash is not below
        self.forced_out: int | None = None  # a row kept for training although its hash is below
        self.held_out_rows = 0
        if hold_out <= 0 or total == 0:
            return
        lowest, highest = (np.inf, -1), (-np.inf, -1)
        for start, stop in self._chunks(0, total):
            draws = self._draws(start, stop)
            self.held_out_rows += int((draws < hold_out).sum())
            low, high = int(draws.argmin()), int(draws.argmax())
            lowest = min(lowest, (draws[low], start + low))
            highest = max(highest, (draws[high], start + high))
        if self.held_out_rows == 0:
            self.forced_in, self.held_out_rows = lowest[1], 1
        elif self.held_out_rows == total and total > 1:
            self.forced_out, self.held_out_rows = highest[1], total - 1

    @staticmethod
    def _chunks(start: int, stop: int, size: int = 1 << 20):
        for first in range(start, stop, size):
            yield first, min(stop, first + size)

    def _draws(self, start: int, stop: int) -> np.ndarray:
        """A uniform number in [0, 1) per row ``start..stop``, from the row number and seed."""
        return _splitmix64(np.arange(start, stop, dtype=np.uint64), self.seed) / 2.0**64

    def held_out(self, start: int, stop: int) -> np.ndarray:
        """Whether each row ``start..stop`` is held out."""
        mask = np.zeros(stop - start, dtype=bool)
        if self.hold_out <= 0:
            return mask
        mask[:] = self._draws(start, stop) < self.hold_out
        for row, value in ((self.forced_in, True), (self.forced_out, False)):
            if row is not None and start <= row < stop:
                mask[row - start] = value
        return mask

    def range_of(self, rank: int, world: int) -> tuple[int, int]:
        """The global rows ``start..stop`` replica ``rank`` of ``world`` reads."""
        return self._boundary(rank, world), self._boundary(rank + 1, world)

    def _boundary(self, rank: int, world: int) -> int:
        """The row where replica ``rank``'s range starts: its first training row."""
        if rank == 0:
            return 0
        if rank == world:
            return self.total
        training = self.total - self.held_out_rows
        wanted = rank * training // world  # training rows before this replica's range
        if self.hold_out <= 0:
            return wanted
        seen = 0
        for start, stop in self._chunks(0, self.total):
            kept = np.flatnonzero(~self.held_out(start, stop))
            if seen + len(kept) > wanted:
                return start + int(kept[wanted - seen])
            seen += len(kept)
        return self.total


def _splitmix64(values: np.ndarray, seed: int) -> np.ndarray:
    """SplitMix64's output function of ``values + seed``: a fixed, well-mixed 64-bit hash."""
    with np.errstate(over="ignore"):
        mixed = values + np.uint64(seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return mixed ^ (mixed >> np.uint64(31))


def hashed_rows_held_out(frame: pd.DataFrame, hold_out: float, seed: int) -> np.ndarray:
    """Held-out rows of a source without row numbers (BigQuery): a seeded hash of each row's
    values decides, so again the same rows for any replica count."""
    if hold_out <= 0 or frame.empty:
        return np.zeros(len(frame), dtype=bool)
    hashes = pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)
    return _splitmix64(hashes, seed) / 2.0**64 < hold_out
