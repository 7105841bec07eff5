"""The metric this trainer reports for hyperparameter tuning: vertex.yaml's ``hpt.metric``.
You should not need to change this: the metric follows ``--eval-metric`` and ``--objective``.

Framework-free on purpose: ``make check`` and ``make submit-hpt`` read it to check the study.
"""

from __future__ import annotations

from vertex_trainer_runtime import cli

from trainer import flags, objectives


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` the trainer reports when run with ``trainer_args``."""
    parsed = cli.parse(flags.Flags, flags.DESCRIPTION, list(trainer_args))
    return objectives.tuning_metric(parsed.model.objective, parsed.training.eval_metric)
