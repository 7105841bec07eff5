"""The study folder's journal: every trial's values, reports and end, appended as they happen.

One JSON object per line, each written whole and flushed to disk before the study acts on it,
so a study killed at any moment leaves at most a torn last line, which the next read drops
(and the next write cuts off). The journal is the study's one record: the tables, the best
trial and the plot are written from it, and ``STUDY=latest`` resumes from it.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

JOURNAL = "journal.jsonl"
LOCK = ".lock"
ENDED = ("SUCCEEDED", "STOPPED", "FAILED")
SPEC_KEYS = {"hpt", "trials", "parallel", "trainer_args", "module", "seed"}  # tune_local.command


@dataclass
class Trial:
    id: int
    values: dict[str, str]
    state: str = "ACTIVE"  # ACTIVE until it ends: SUCCEEDED, STOPPED or FAILED
    measurements: list[dict] = field(default_factory=list)
    final: float | None = None
    why: str = ""  # why it failed or stopped
    seconds: float = 0.0  # its runs' wall time, all attempts of the study together

    def summary(self) -> dict:
        return {"values": self.values, "state": self.state, "final": self.final}


@dataclass
class Journal:
    folder: Path
    spec: dict = field(default_factory=dict)  # the study as it began: hpt, budget, args
    trials: dict[int, Trial] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.folder / JOURNAL

    def append(self, record: dict) -> None:
        line = json.dumps(record) + "\n"  # values keep the parameters' order
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._apply(record)

    def _apply(self, record: dict) -> None:
        kind = record.get("event")
        if kind == "study":
            self.spec = record["spec"]
            return
        if kind == "trial":
            self.trials[record["id"]] = Trial(record["id"], dict(record["values"]))
            return
        trial = self.trials.get(record.get("id"))
        if trial is None:
            return
        # A damaged record (a field missing or not a number) raises here: ``read`` skips it.
        if kind == "report":
            trial.measurements.append(
                {
                    "step": int(record["step"]),
                    "value": float(record["value"]),
                    "time": float(record["time"]),
                }
            )
        elif kind == "end":
            if record["state"] not in ENDED:
                raise ValueError(f"unknown state {record['state']!r}")
            final = record.get("final")
            trial.state, trial.final = record["state"], None if final is None else float(final)
            trial.why = str(record.get("why", ""))
            trial.seconds = float(record.get("seconds", 0.0))
        elif kind == "run":  # a run of an unfinished trial ended with the study: its time
            trial.seconds += float(record.get("seconds", 0.0))

    def start(self, spec: dict) -> None:
        self.append({"event": "study", "spec": spec})

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys((*ENDED, "ACTIVE"), 0)
        for trial in self.trials.values():
            counts[trial.state] += 1
        return counts


def read(folder: Path) -> Journal:
    """The journal of a study folder; ValueError when the folder holds no study."""
    journal = Journal(Path(folder))
    try:
        text = journal.path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{folder}: no study here ({JOURNAL} is missing)") from None
    complete, _, torn = text.rpartition("\n")
    for line in complete.splitlines():
        try:
            record = json.loads(line)
            journal._apply(record)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a line damaged by hand: skipped, as a torn one
    if torn:  # a write cut short by a kill: drop it, so the next line starts on its own
        with open(journal.path, "r+", encoding="utf-8") as handle:
            handle.truncate(len(complete.encode("utf-8")) + (1 if complete else 0))
    if not isinstance(journal.spec, dict) or not SPEC_KEYS <= set(journal.spec):
        raise ValueError(f"{folder}: {JOURNAL} does not begin with the study's spec")
    return journal


def lock(folder: Path):
    """Hold the study folder for this process (released when it exits, even by a kill).

    Two studies in one folder would run the same trials twice and interleave the journal."""
    handle = open(Path(folder) / LOCK, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ValueError(
            f"{folder}: this study is running in {holder}; wait for it or stop it first"
        ) from None
    handle.truncate(0)
    handle.write(f"process {os.getpid()}")
    handle.flush()
    return handle
