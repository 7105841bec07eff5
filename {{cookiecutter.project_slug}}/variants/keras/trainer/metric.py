"""The hyperparameter-tuning metric's name, in a module without TensorFlow so that config checks
can import it cheaply. It must equal ``hpt.metric.id`` in vertex.yaml."""

from __future__ import annotations

METRIC = "accuracy"  # Keras logs it for the eval set as val_accuracy
GOAL = "maximize"


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` for config checks: the same whatever the flags."""
    return METRIC, GOAL
