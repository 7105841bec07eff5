"""A trial's measurements: read from its hypertune output, its final one, the median rule.

cloudml-hypertune keeps the last 100 reports and rewrites its whole file at each one, so the
study reads each running trial's file every second and keeps every report it has seen itself
(the journal), as Vertex keeps a trial's measurements.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

from vertex_trainer_tools.tune_local.space import finite

# Vertex does not publish how many completed trials its median rule waits for; Optuna's
# MedianPruner waits for 5. A local study is small: 3 keeps the rule from stopping trials on
# one or two others' curves.
MIN_COMPLETED = 3


def read_reports(path: str, metric: str) -> list[dict]:
    """The reports of ``metric`` in a hypertune output file: ``{"step", "value", "time"}``.

    A missing file, a line being rewritten, a report of another tag or one whose value is not
    a finite number are skipped (the next read sees the rewritten file whole)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, ValueError):
        return []
    reports = []
    for line in lines:
        try:
            record = json.loads(line)
            value = finite(record[metric])
            step = int(float(record.get("global_step") or 0))
            when = float(record.get("timestamp") or 0)
        except (ValueError, KeyError, TypeError):
            continue
        if value is not None:
            reports.append({"step": step, "value": value, "time": when})
    return reports


def newer(reports: Sequence[dict], seen: Sequence[dict]) -> list[dict]:
    """The reports not kept yet: those after the newest kept one (by its timestamp)."""
    last = max((report["time"] for report in seen), default=None)
    return [report for report in reports if last is None or report["time"] > last]


def final(measurements: Sequence[dict], selection: str, goal: str) -> float | None:
    """The trial's final measurement: its best report or its last (``measurement_selection``)."""
    values = [m["value"] for m in measurements]
    if not values:
        return None
    if selection == "last":
        return values[-1]
    return max(values) if goal == "maximize" else min(values)


def running_average(measurements: Sequence[dict], up_to_step: int) -> float | None:
    values = [m["value"] for m in measurements if m["step"] <= up_to_step]
    return sum(values) / len(values) if values else None


def median_says_stop(
    measurements: Sequence[dict],
    completed: Sequence[Sequence[dict]],
    goal: str,
    min_completed: int = MIN_COMPLETED,
) -> bool:
    """Vertex's median automated stopping rule (``StudySpec.MedianAutomatedStoppingSpec``).

    A running trial stops when its best value so far is strictly worse than the median of the
    completed trials' performance, each the running average of its values reported up to this
    trial's last step. Completed trials with no report by that step do not count; nor does the
    rule act before ``min_completed`` of them count.
    """
    if not measurements:
        return False
    step = measurements[-1]["step"]
    performances = [running_average(other, step) for other in completed]
    performances = [p for p in performances if p is not None]
    if len(performances) < max(1, min_completed):
        return False
    median = statistics.median(performances)
    values = [m["value"] for m in measurements]
    if goal == "maximize":
        return max(values) < median
    return min(values) > median
