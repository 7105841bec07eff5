"""YOURS TO CHANGE: the objectives ``--objective`` takes and the metric each reports by default.
Plain Python (no XGBoost, no numpy): the config checks import it without installing XGBoost.
"""

from __future__ import annotations

from dataclasses import dataclass

from vertex_trainer_runtime.cli import InputError

# --objective shorthand -> XGBoost's objective.
OBJECTIVES = {
    "binary": "binary:logistic",
    "multiclass": "multi:softprob",
    "regression": "reg:squarederror",
}
# --objective shorthand -> (metric id reported for tuning when --eval-metric is not given, goal).
# The id is the cloudml-hypertune tag, so it must equal vertex.yaml's hpt.metric.id.
METRIC_FOR_OBJECTIVE = {
    "binary": ("auc", "maximize"),
    "multiclass": ("mlogloss", "minimize"),
    "regression": ("rmse", "minimize"),
}
# XGBoost metrics where higher is better (as XGBoost's own early stopping decides).
_MAXIMIZED = ("auc", "aucpr", "pre", "map", "ndcg")


@dataclass(frozen=True)
class Objective:
    name: str  # XGBoost's objective, e.g. binary:logistic
    kind: str  # binary, multiclass or regression


def objective(value: str) -> Objective:
    """``binary``/``multiclass``/``regression`` or an XGBoost objective such as ``reg:tweedie``."""
    value = value.strip()
    if value in OBJECTIVES:
        return Objective(OBJECTIVES[value], value)
    family, _, rest = value.partition(":")
    if not rest:
        raise InputError(
            f"--objective={value}: use binary, multiclass, regression or an XGBoost objective "
            "such as binary:logistic, multi:softprob, reg:squarederror"
        )
    if family == "binary":
        return Objective(value, "binary")
    if family == "multi":
        return Objective(value, "multiclass")
    if family in ("reg", "count", "survival"):
        return Objective(value, "regression")
    raise InputError(f"--objective={value}: ranking and other objectives are not supported here")


def metrics(value: str | None, kind: str) -> list[str]:
    """The eval metrics; the last one drives early stopping and hyperparameter tuning."""
    names = [name.strip() for name in (value or "").split(",") if name.strip()]
    return names or [METRIC_FOR_OBJECTIVE[kind][0]]


def metric_goal(metric: str) -> str:
    """``maximize`` or ``minimize`` for an XGBoost eval metric such as ``auc`` or ``ndcg@5``."""
    return "maximize" if metric.partition("@")[0] in _MAXIMIZED else "minimize"


def tuning_metric(objective_flag: str, eval_metric: str | None = None) -> tuple[str, str]:
    """(metric id, goal) the trainer reports for these ``--objective``/``--eval-metric`` values."""
    name = metrics(eval_metric, objective(objective_flag).kind)[-1]
    return name, metric_goal(name)


def check_metric_defined(metric: str, labels, source: str, classes: list | None) -> None:
    """AUC of eval rows that all have one class is undefined (XGBoost reports NaN, which a
    tuning trial cannot use): stop before training instead."""
    if metric.partition("@")[0] in ("auc", "aucpr") and len(set(labels.tolist())) < 2:
        only = classes[int(labels[0])] if classes else labels[0]
        raise InputError(
            f"{source}: the label column has one class ({only!r}) in all eval rows, so "
            f"{metric} is undefined (e.g. eval rows of both classes)"
        )
