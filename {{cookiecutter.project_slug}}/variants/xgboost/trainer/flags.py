"""The flags of ``python -m trainer.task``: the shared ones (``vertex_trainer_runtime.cli``) and
this trainer's.

Framework-free on purpose: the tools (``make check``, ``make submit-hpt``, the local emulator)
import it to know the trainer's flags, so a study parameter or a ``job.args`` flag the trainer
lacks is refused before any job starts. Add a flag here and read it in ``train.run(args, ctx)``.
"""

from __future__ import annotations

import argparse

from vertex_trainer_runtime import cli


def base_score(value: str) -> float | str:
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {value!r}") from None


DESCRIPTION = (
    "Train an XGBoost model on CSV/Parquet files (local, /gcs/ or gs://), a BigQuery table "
    "(bq://project.dataset.table) or synthetic data, and export model.bst for Vertex AI."
)
# Why job.reduction_server is of no use to this trainer (`make check` refuses it); None: it is.
NO_REDUCTION_SERVER = (
    "XGBoost all-reduces with its own collective (TCP through its tracker; on GPUs, the NCCL "
    "of its wheel), not the TensorFlow/PyTorch NCCL all-reduce Google's plugin serves, and this "
    "image has no plugin: the reducers would be paid for and idle; remove it"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """XGBoost's flags; Vertex tuning trials pass them as ``--max_depth=6.0`` and that works."""
    group = parser.add_argument_group("xgboost")
    group.add_argument("--label-column", default="label", help="name of the label column")
    group.add_argument(
        "--objective",
        default="binary",
        help="binary, multiclass, regression, or an XGBoost objective (binary:logistic, "
        "multi:softprob, reg:squarederror, reg:tweedie, ...)",
    )
    group.add_argument(
        "--num-boost-round", type=cli.positive_integer, default=200, help="boosting rounds"
    )
    group.add_argument("--max-depth", type=cli.non_negative_integer, default=6, help="tree depth")
    group.add_argument(
        "--eta",
        "--learning-rate",
        dest="eta",
        type=cli.positive_float,
        default=0.1,
        help="learning rate (shrinkage)",
    )
    group.add_argument("--subsample", type=cli.fraction, default=1.0, help="row sample per tree")
    group.add_argument(
        "--colsample-bytree", type=cli.fraction, default=1.0, help="column sample per tree"
    )
    group.add_argument(
        "--min-child-weight",
        type=cli.non_negative_float,
        default=1.0,
        help="minimum hessian sum in a leaf",
    )
    group.add_argument("--max-bin", type=cli.positive_integer, default=256, help="histogram bins")
    group.add_argument(
        "--early-stopping-rounds",
        type=cli.non_negative_integer,
        default=0,
        help="stop when the eval metric has not improved for this many rounds and export the "
        "best round's model (0: off)",
    )
    group.add_argument(
        "--eval-metric",
        default=None,
        help="comma-separated XGBoost eval metrics; the last one drives early stopping and is "
        "the hyperparameter-tuning metric id (default: auc, mlogloss or rmse by objective)",
    )
    group.add_argument(
        "--base-score",
        type=base_score,
        default=0.5,
        help="initial prediction; 0.5 keeps model.bst correct in Vertex's prebuilt "
        "xgboost-cpu.2-1 prediction container, 'auto' lets XGBoost estimate it (serving then "
        "needs xgboost>=3.1)",
    )
    group.add_argument(
        "--eval-fraction",
        type=cli.fraction,
        default=0.1,
        help="share of training rows held out for evaluation when --eval-data is not given",
    )
    group.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda when a GPU and the CUDA build of XGBoost are present",
    )
    group.add_argument(
        "--nthread",
        type=cli.non_negative_integer,
        default=0,
        help="CPU threads (0: all cores of this machine)",
    )
    group.add_argument(
        "--checkpoint-rounds",
        type=cli.non_negative_integer,
        default=50,
        help="checkpoint every N rounds (0: only by time and at the end)",
    )
    group.add_argument(
        "--report-rounds",
        type=cli.non_negative_integer,
        default=10,
        help="log and report the eval metric for hyperparameter tuning every N rounds",
    )


def parser() -> argparse.ArgumentParser:
    """The whole command line: shared flags, then this trainer's."""
    result = cli.base_parser(DESCRIPTION)
    add_arguments(result)
    result.add_argument(
        "--project",
        default=None,
        help="project billed for BigQuery reads (default: CLOUD_ML_PROJECT_ID)",
    )
    return result
