"""YOU MAY MODIFY, with ``hpt.metric`` in vertex.yaml: the tuning metric's name and goal.

Framework-free: config checks import it without installing torch or transformers.
"""

from __future__ import annotations

METRIC = "accuracy"  # eval accuracy of the model that is exported, reported last
GOAL = "maximize"


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` for config checks: the same whatever the flags."""
    return METRIC, GOAL
