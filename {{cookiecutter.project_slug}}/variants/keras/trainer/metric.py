"""The hyperparameter-tuning metric; it must equal ``hpt.metric.id`` in vertex.yaml.

YOU MAY CHANGE THIS FILE with vertex.yaml. No TensorFlow here: the config checks import it.
"""

from __future__ import annotations

METRIC = "accuracy"  # Keras logs it for the eval set as val_accuracy
GOAL = "maximize"


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` for config checks: the same whatever the flags."""
    return METRIC, GOAL
