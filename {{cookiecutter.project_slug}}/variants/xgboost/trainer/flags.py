"""YOURS TO CHANGE: the flags of ``python -m trainer.task``, as typed sections.

A new flag is one field in the section it configures and its use where that section is read.
Framework-free on purpose: ``trainer/spec.py`` declares these flags, and the tools (``make
check``, ``make submit-hpt``, the local emulator) read them to refuse a ``job.args`` flag or
study parameter the trainer lacks before any job.
"""

from __future__ import annotations

import argparse
import dataclasses

from vertex_trainer_runtime import cli
from vertex_trainer_runtime.cli import flag


def number_or_auto(value: str) -> float | str:
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {value!r}") from None


@dataclasses.dataclass(frozen=True)
class Data:
    """data: the label column, held-out rows, BigQuery billing"""

    label_column: str = flag("label", "name of the label column")
    eval_fraction: float = flag(
        0.1,
        "share of training rows held out for evaluation when --eval-data is not given",
        type=cli.fraction,
    )
    project: str | None = flag(
        help="project billed for BigQuery reads (default: CLOUD_ML_PROJECT_ID)"
    )


@dataclasses.dataclass(frozen=True)
class Model:
    """model: the booster's parameters"""

    objective: str = flag(
        "binary",
        "binary, multiclass, regression, or an XGBoost objective (binary:logistic, "
        "multi:softprob, reg:squarederror, reg:tweedie, ...)",
    )
    max_depth: int = flag(6, "tree depth", type=cli.non_negative_integer)
    eta: float = flag(
        0.1, "learning rate (shrinkage)", type=cli.positive_float, aliases=("--learning-rate",)
    )
    subsample: float = flag(1.0, "row sample per tree", type=cli.fraction)
    colsample_bytree: float = flag(1.0, "column sample per tree", type=cli.fraction)
    min_child_weight: float = flag(
        1.0, "minimum hessian sum in a leaf", type=cli.non_negative_float
    )
    max_bin: int = flag(256, "histogram bins", type=cli.positive_integer)
    base_score: float | str = flag(
        0.5,
        "initial prediction; 0.5 keeps model.bst correct in Vertex's prebuilt "
        "xgboost-cpu.2-1 prediction container, 'auto' lets XGBoost estimate it (serving then "
        "needs xgboost>=3.1)",
        type=number_or_auto,
    )


@dataclasses.dataclass(frozen=True)
class Training:
    """training: rounds, early stopping, eval metrics, hardware, checkpoints, reports"""

    num_boost_round: int = flag(200, "boosting rounds", type=cli.positive_integer)
    early_stopping_rounds: int = flag(
        0,
        "stop when the eval metric has not improved for this many rounds and export the "
        "best round's model (0: off)",
        type=cli.non_negative_integer,
    )
    eval_metric: str | None = flag(
        help="comma-separated XGBoost eval metrics; the last one drives early stopping and is "
        "the hyperparameter-tuning metric id (default: auc, mlogloss or rmse by objective)"
    )
    device: str = flag(
        "auto",
        "auto: cuda when a GPU and the CUDA build of XGBoost are present",
        choices=["auto", "cpu", "cuda"],
    )
    nthread: int = flag(
        0, "CPU threads (0: all cores of this machine)", type=cli.non_negative_integer
    )
    checkpoint_rounds: int = flag(
        50,
        "checkpoint every N rounds (0: only by time and at the end)",
        type=cli.non_negative_integer,
    )
    report_rounds: int = flag(
        10,
        "log and report the eval metric for hyperparameter tuning every N rounds",
        type=cli.non_negative_integer,
    )


@dataclasses.dataclass(frozen=True)
class Flags:
    """Every flag, by section; ``Flags()`` holds the defaults."""

    shared: cli.SharedFlags = dataclasses.field(default_factory=cli.SharedFlags)
    data: Data = dataclasses.field(default_factory=Data)
    model: Model = dataclasses.field(default_factory=Model)
    training: Training = dataclasses.field(default_factory=Training)
