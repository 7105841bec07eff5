"""The tuning metric's name, in a module without torch or transformers.

``METRIC`` is the tag reported to Vertex hyperparameter tuning and must equal ``hpt.metric.id``
in vertex.yaml; config checks import it from here without installing the framework.
"""

from __future__ import annotations

METRIC = "accuracy"  # eval accuracy of the model that is exported, reported last
GOAL = "maximize"


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` for config checks: the same whatever the flags."""
    return METRIC, GOAL
