"""The metric this trainer reports for hyperparameter tuning: vertex.yaml's ``hpt.metric``.

It follows the flags (the last of ``--eval-metric``, else the default of ``--objective``), as
``trainer/objectives.py`` decides for training. Framework-free on purpose: ``make check``
and ``make submit-hpt`` read it to check the study before any API call.
"""

from __future__ import annotations

from vertex_trainer_runtime import cli

from trainer import flags, objectives


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` the trainer reports when run with ``trainer_args``."""
    args, _ = flags.parser().parse_known_args(cli.normalize_argv(list(trainer_args)))
    return objectives.tuning_metric(args.objective, args.eval_metric)
