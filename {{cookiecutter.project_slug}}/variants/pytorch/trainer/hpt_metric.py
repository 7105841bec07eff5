"""The metric this trainer reports for hyperparameter tuning: vertex.yaml's ``hpt.metric``.

Framework-free on purpose: ``python -m tools.config check`` and ``make submit-hpt`` import it
to check the study before any API call, without torch. Keep it in step with
``trainer/train.py`` (``METRIC``, the evaluation accuracy of each evaluation).
"""

from __future__ import annotations


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)``: evaluation accuracy, higher is better, whatever the flags."""
    return "accuracy", "maximize"
