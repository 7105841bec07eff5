"""The metric this trainer reports for hyperparameter tuning: vertex.yaml's ``hpt.metric``.

It follows the flags (the last of ``--eval-metric``, else the default of ``--objective``), as
``trainer/objectives.py`` decides for training. Framework-free on purpose: ``make check``
and ``make submit-hpt`` read it to check the study before any API call.
"""

from __future__ import annotations

from trainer import objectives


def flag_value(args: list[str], name: str, default: str | None) -> str | None:
    """The last value of ``--name`` in ``args`` (``--a_b=v``, ``--a-b=v`` or ``--a-b v``)."""
    value = default
    for index, token in enumerate(args):
        flag, sep, rest = token.partition("=")
        if flag.replace("_", "-") != f"--{name}":
            continue
        if sep:
            value = rest
        elif index + 1 < len(args):
            value = args[index + 1]
    return value


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` the trainer reports when run with ``trainer_args``."""
    objective = flag_value(trainer_args, "objective", "binary") or ""
    return objectives.tuning_metric(objective, flag_value(trainer_args, "eval-metric", None))
