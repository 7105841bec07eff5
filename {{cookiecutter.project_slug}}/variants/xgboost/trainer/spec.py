"""YOURS TO CHANGE: what this trainer is, for the runtime and the tools, in one declaration.

``trainer/task.py`` hands ``SPEC`` to the runtime, which parses its flags and calls its ``run``;
``make check``, ``make submit-hpt`` and ``local-run`` read it, without XGBoost, to refuse a flag,
study or Reduction Server the trainer would not use. So this module imports no framework: its
functions are ``"module:function"`` names, imported only when called.
"""

from __future__ import annotations

from vertex_trainer_runtime.spec import TrainerSpec

from trainer import objectives
from trainer.flags import Flags


def tuning_metric(flags: Flags) -> tuple[str, str]:
    """``(metric id, goal)``: the last ``--eval-metric``, else the ``--objective``'s default."""
    return objectives.tuning_metric(flags.model.objective, flags.training.eval_metric)


SPEC = TrainerSpec(
    flags=Flags,
    description=(
        "Train an XGBoost model on CSV/Parquet files (local, /gcs/ or gs://), a BigQuery table "
        "(bq://project.dataset.table) or synthetic data, and export model.bst for Vertex AI."
    ),
    # The metric with the default flags (vertex.yaml's hpt.metric); metric_for follows the flags.
    metric="auc",
    goal="maximize",
    metric_for=tuning_metric,
    no_reduction_server=(
        "XGBoost all-reduces with its own collective (TCP through its tracker; on GPUs, the NCCL "
        "of its wheel), not the TensorFlow/PyTorch NCCL all-reduce Google's plugin serves, and "
        "this image has no plugin: the reducers would be paid for and idle; remove it"
    ),
    export_file="model.bst",  # the booster, as Vertex's prebuilt XGBoost image loads it
    # The runtime's fixed order of an XGBoost run, which calls the trainer's functions below.
    run="vertex_trainer_runtime.xgboost.run:run",
    make_data="trainer.train:read_rows",  # this replica's rows
    make_model="trainer.train:prepare",  # the matrices and the booster's parameters
    evaluate="trainer.model:evaluate",
    export="trainer.train:export",  # model.bst and its metadata
)
