"""The metric this trainer reports for hyperparameter tuning: vertex.yaml's ``hpt.metric``.

It depends on the flags: the last of ``--eval-metric``, else the default of ``--objective``
(binary: auc, multiclass: mlogloss, regression: rmse), as ``trainer/model.py`` picks it.
Framework-free on purpose: ``python -m tools.config check`` and ``make submit-hpt`` import it
to check the study before any API call, without XGBoost.
"""

from __future__ import annotations

KINDS = {"binary": "binary", "multiclass": "multiclass", "regression": "regression"}
FAMILIES = {
    "binary": "binary",
    "multi": "multiclass",
    "reg": "regression",
    "count": "regression",
    "survival": "regression",
}
DEFAULT_METRICS = {"binary": "auc", "multiclass": "mlogloss", "regression": "rmse"}
# XGBoost's own rule (xgboost.callback.EarlyStopping): these are better when higher.
MAXIMIZE_PREFIXES = ("auc", "aucpr", "pre", "map", "ndcg")


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


def objective_kind(value: str) -> str:
    value = value.strip()
    family, _, rest = value.partition(":")
    kind = KINDS.get(value) or (FAMILIES.get(family) if rest else None)
    if kind is None:
        raise ValueError(
            f"--objective={value}: use binary, multiclass, regression or an XGBoost objective "
            "such as binary:logistic, multi:softprob, reg:squarederror"
        )
    return kind


def reported_metric(trainer_args: list[str]) -> tuple[str, str]:
    """``(metric id, goal)`` the trainer reports when run with ``trainer_args``."""
    kind = objective_kind(flag_value(trainer_args, "objective", "binary") or "")
    names = (flag_value(trainer_args, "eval-metric", "") or "").split(",")
    names = [name.strip() for name in names if name.strip()]
    metric = names[-1] if names else DEFAULT_METRICS[kind]
    higher = metric != "mape" and metric.startswith(MAXIMIZE_PREFIXES)
    return metric, "maximize" if higher else "minimize"
