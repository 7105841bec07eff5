"""Goodput from the job ledger (``vertex_trainer_runtime.ledger``): where each attempt of each
replica spent its wall time, and what the job's paid VM-time bought.

The tools' ``make report`` prints it (and draws the timeline); the chief logs ``so_far`` at the
end of a run (the Experiment run, TensorBoard where the variant writes it). The definitions are
Google's ``ml-goodput-measurement``'s where it has one: total time from the first start to the
last end; the first steps' time above the steady step time is compiling (its PROGRAM_STARTUP);
steps after the checkpoint the next attempt resumed from are lost (WASTED_PROGRESS); the time
between an attempt's end and the next one's start is the restart gap (recovery). Ours beyond it:
one lane per replica (its VM), paid time = each lane's first start to its last end, waits for
peers as a category of their own. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import struct
from dataclasses import dataclass, field

# Where an attempt's wall time went; "other" is the rest (shutdown, export, what no record holds).
PROGRESS = struct.Struct("<qd")  # the ledger's progress file: the step reached and its time
CATEGORIES = ("startup", "compile", "productive", "evaluation", "checkpoint", "waiting", "lost")
CATEGORIES += ("other",)
HEADINGS = ("start-up", *CATEGORIES[1:-1])


# The numbers each event must carry to be counted (a damaged record is skipped, not fatal).
NUMBERS = {
    "steps": ("first_step", "last_step", "seconds", "paused"),
    "step_start_time": ("step_count",),
    "pause": ("seconds",),
    "peer_wait": ("seconds",),
    "progress": ("step",),
    "model_flops": ("flops",),
    "work": ("rows",),
    "job_end_time": ("step",),
}


@dataclass
class Attempt:
    """One process lifetime of one replica, from its ledger records."""

    replica: str
    key: str  # the attempt's start in ms, as the file names give it
    records: list[dict] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    lost_steps: int = 0
    gap: float | None = None  # to the next attempt of this replica
    flops: float = 0.0

    def of(self, event: str) -> list[dict]:
        return [record for record in self.records if record["event"] == event]

    @property
    def start(self) -> float:
        starts = self.of("job_start_time")
        return min(r["time"] for r in starts) if starts else self.records[0]["time"]

    @property
    def end(self) -> float:
        ends = self.of("job_end_time")
        return max(r["time"] for r in ends) if ends else self.records[-1]["time"]

    @property
    def ended(self) -> str:
        """How it ended: its exit code, or what the ledger lacks."""
        ends = self.of("job_end_time")
        if not ends:
            return "no end record (killed?)"
        last = ends[-1]
        reason = f" ({last['reason']})" if last.get("reason") else ""
        return f"exit {last.get('exit_code')}{reason}"

    @property
    def training_start(self) -> dict | None:
        """The ``step_start_time`` of the first range of steps: a trainer may start its clock
        again once it knows the step it resumed from (XGBoost's rounds)."""
        starts = self.of("step_start_time")
        ranges = self.of("steps")
        if ranges:
            starts = [r for r in starts if r["time"] <= ranges[0]["time"]] or starts
        return starts[-1] if starts else None

    @property
    def restored(self) -> int | None:
        """The steps done before this attempt's first step: the checkpoint it resumed from."""
        start = self.training_start
        return int(start["step_count"]) if start else None

    @property
    def reached(self) -> int:
        """The last step this attempt is known to have done."""
        steps = [int(r["last_step"]) for r in self.of("steps")]
        ends = self.of("progress") + self.of("job_end_time")
        steps += [int(r["step"]) for r in ends if "step" in r]
        return max(steps, default=self.restored or 0)


@dataclass
class Ledger:
    attempts: list[Attempt]
    skipped_lines: int
    files: int


def parse(texts: dict[str, bytes]) -> Ledger:
    """The records of the ledger's batch files (``name -> content``), by replica and attempt;
    lines that do not parse (a torn last line after a ``kill -9``) are counted, not fatal."""
    attempts: dict[tuple[str, str], Attempt] = {}
    skipped = 0
    for name, data in texts.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[3] == "progress":
            mark = _progress(data)
            if mark is not None:
                attempts.setdefault((parts[0], parts[1]), Attempt(parts[0], parts[1]))
                attempts[(parts[0], parts[1])].records.append(mark)
            continue
        if len(parts) != 5:
            continue  # not a batch of the ledger
        replica, key = parts[0], parts[1]
        attempt = attempts.setdefault((replica, key), Attempt(replica, key))
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
                for name in ("time", *NUMBERS.get(record["event"], ())):
                    record[name] = float(record[name])
                    if not math.isfinite(record[name]):
                        raise ValueError(name)
            except (ValueError, KeyError, TypeError, OverflowError):
                skipped += 1
                continue
            attempt.records.append(record)
    found = [a for a in attempts.values() if a.records]
    for attempt in found:
        attempt.records.sort(key=lambda r: r["time"])
    found.sort(key=lambda a: (a.replica, a.start))
    return Ledger(found, skipped, len(texts))


def _progress(data: bytes) -> dict | None:
    """The progress file's record (the step an attempt reached, exact after a kill -9)."""
    if len(data) != PROGRESS.size:
        return None
    step, when = PROGRESS.unpack(data)
    if step < 0 or not math.isfinite(when) or when <= 0:
        return None
    return {"event": "progress", "time": when, "step": float(step)}


def read_folder(folder: str) -> Ledger:
    """The ledger in a local (or /gcs/) folder; no attempts when there is none."""
    if not os.path.isdir(folder):
        return Ledger([], 0, 0)
    names = sorted(n for n in os.listdir(folder) if n.endswith((".jsonl", ".progress")))
    texts = {}
    for name in names:
        with open(os.path.join(folder, name), "rb") as handle:
            texts[name] = handle.read()
    return parse(texts)


def so_far(folder: str) -> dict[str, float]:
    """The job's figures from its ledger as it stands, for the end of a run: goodput,
    productive and paid seconds, lost steps and seconds, restart gaps (empty: no ledger)."""
    found = read_folder(folder)
    if not found.attempts:
        return {}
    account(found)
    totals = summary(found)
    return {
        "goodput": round(totals["goodput"], 4),
        "productive_seconds": round(totals["seconds"]["productive"], 2),
        "paid_seconds": round(totals["paid_seconds"], 2),
        "lost_steps": totals["lost_steps"],
        "lost_seconds": round(totals["seconds"]["lost"], 2),
        "restart_gap_seconds": round(totals["gap_seconds"], 2),
        "attempts": totals["attempts"],
    }


def account(ledger: Ledger) -> None:
    """Fill each attempt's seconds by category, its lost steps and the gap to its next one."""
    by_replica: dict[str, list[Attempt]] = {}
    for attempt in ledger.attempts:
        by_replica.setdefault(attempt.replica, []).append(attempt)
    for attempts in by_replica.values():
        for index, attempt in enumerate(attempts):
            following = attempts[index + 1] if index + 1 < len(attempts) else None
            _account(attempt, following)


def _account(attempt: Attempt, following: Attempt | None) -> None:
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    training = attempt.training_start
    began = training["time"] if training else attempt.end
    waits = attempt.of("peer_wait")
    seconds["waiting"] = sum(float(r["seconds"]) for r in waits)
    early_waits = sum(float(r["seconds"]) for r in waits if r["time"] <= began)
    early_pauses = 0.0  # before any step: an attempt that only evaluates and exports
    for pause in attempt.of("pause"):
        kind = "evaluation" if pause.get("kind") == "evaluation" else "checkpoint"
        seconds[kind] += pause["seconds"]
        early_pauses += pause["seconds"] if pause["time"] <= began else 0.0
    seconds["startup"] = max(0.0, began - attempt.start - early_waits - early_pauses)
    ranges = attempt.of("steps")
    net = [max(0.0, float(r["seconds"]) - float(r.get("paused", 0))) for r in ranges]
    counts = [max(1, int(r["last_step"]) - int(r["first_step"]) + 1) for r in ranges]
    steady = None
    if len(ranges) > 1:
        steady = statistics.median(n / c for n, c in zip(net[1:], counts[1:], strict=True))
        seconds["compile"] = max(0.0, net[0] - steady * counts[0])  # tracing, compiling, warm-up
        net[0] -= seconds["compile"]
    elif ranges:
        steady = net[0] / counts[0]
    redone = 0.0  # the steady time of the recorded steps after the checkpoint resumed from
    resumed_at = following.restored if following is not None else None
    if resumed_at is not None:
        attempt.lost_steps = max(0, attempt.reached - resumed_at)
        for record, time_, count in zip(ranges, net, counts, strict=True):
            redone += time_ * min(count, max(0, int(record["last_step"]) - resumed_at)) / count
        recorded = max((int(r["last_step"]) for r in ranges), default=resumed_at)
        beyond = attempt.reached - max(recorded, resumed_at)  # progress past the last range
        tail = 0.0
        if beyond > 0 and steady is not None:
            since = ranges[-1]["time"] if ranges else began
            tail = min(max(0.0, attempt.end - since), steady * beyond)
        seconds["lost"] = redone + tail
    seconds["productive"] = sum(net) - redone
    wall = attempt.end - attempt.start
    seconds["other"] = wall - sum(seconds[c] for c in CATEGORIES if c != "other")
    attempt.seconds = seconds
    attempt.flops = sum(float(r.get("flops", 0)) for r in attempt.of("model_flops"))
    if following is not None:
        attempt.gap = max(0.0, following.start - attempt.end)


def summary(ledger: Ledger, gpus: dict[str, int] | None = None) -> dict:
    """The job's totals: paid seconds per replica (its first start to its last end),
    productive seconds, goodput, lost steps and seconds, restart gaps, GPU seconds."""
    lanes: dict[str, list[Attempt]] = {}
    for attempt in ledger.attempts:
        lanes.setdefault(attempt.replica, []).append(attempt)
    paid = {name: a[-1].end - a[0].start for name, a in lanes.items()}
    totals = {c: sum(a.seconds[c] for a in ledger.attempts) for c in CATEGORIES}
    gpu_seconds = sum(
        seconds * (gpus or {}).get(name.rsplit("-", 1)[0], 0) for name, seconds in paid.items()
    )
    chief = lanes.get("workerpool0-0") or next(iter(lanes.values()))
    return {
        "replicas": len(lanes),
        "attempts": len(chief),
        "paid_seconds": sum(paid.values()),
        "wall_seconds": max(a.end for a in ledger.attempts) - min(a.start for a in ledger.attempts),
        "gpu_seconds": gpu_seconds,
        "seconds": totals,
        "goodput": totals["productive"] / sum(paid.values()) if sum(paid.values()) > 0 else 0.0,
        "lost_steps": sum(a.lost_steps for a in chief),
        "gap_seconds": sum(a.gap or 0.0 for a in ledger.attempts),
        "model_flops": sum(a.flops for a in ledger.attempts),
    }
