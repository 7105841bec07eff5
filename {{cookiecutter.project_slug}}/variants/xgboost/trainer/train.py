"""YOURS TO CHANGE: the rows into XGBoost's matrices, and what the export says about them.

The runtime's run (``vertex_trainer_runtime.xgboost.run``, named in ``trainer/spec.py``) owns the
fixed order: notice, the replicas' collective, restore, checkpoints, the round callbacks, the
final measurement and the export on the chief. It calls ``read_rows`` (before the replicas
join), ``prepare`` (the matrices and the booster's parameters, ``model.params``), then
``model.evaluate`` and ``export``.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xgboost as xgb
from vertex_trainer_runtime import cli, runtime
from vertex_trainer_runtime.xgboost import float_range
from vertex_trainer_runtime.xgboost.run import Prepared, Result

from trainer import data, model, objectives
from trainer import schema as schemas
from trainer.flags import Flags

logger = logging.getLogger(__name__)


@dataclass
class Rows:
    """This replica's rows as read: training rows, which of them are held out, eval rows."""

    train: pd.DataFrame
    held_out: np.ndarray
    eval: pd.DataFrame | None  # None: evaluate on the held-out rows
    seconds: float
    device: str  # chosen before any read: --device=cuda without a CUDA build fails at once


def read_rows(flags: Flags, cluster: runtime.Cluster) -> Rows:
    """This replica's training rows and, with ``--eval-data``, all eval rows (every replica
    reads them all: see data.evaluation_rows). Without it, ``--eval-fraction`` of the training rows,
    chosen by ``--seed`` from all of ``--train-data``, are held out."""
    shared, options = flags.shared, flags.data
    if not shared.train_data:
        raise cli.InputError(
            "--train-data is required: a file, folder or glob (local, /gcs/ or gs://), "
            "bq://project.dataset.table or 'synthetic'"
        )
    device, started = model.device(flags.training.device), time.monotonic()
    read = functools.partial(
        data.read_rows,
        label_column=options.label_column,
        kind=objectives.objective(flags.model.objective).kind,
        seed=shared.seed,
        project=options.project,
    )
    hold_out = 0.0 if shared.eval_data else options.eval_fraction
    shard = data.Shard(cluster.node_rank, cluster.num_nodes)
    train, held_out = read(shared.train_data, "train", shard=shard, hold_out=hold_out)
    evaluation = read(shared.eval_data, "eval")[0] if shared.eval_data else None
    return Rows(train, held_out, evaluation, time.monotonic() - started, device)


def prepare(flags: Flags, rows: Rows, group) -> Prepared:
    """Agree on the schema with the other replicas, encode the rows and bin them once."""
    objective = objectives.objective(flags.model.objective)
    metric_names = objectives.metrics(flags.training.eval_metric, objective.kind)
    source, label_column = flags.shared.train_data, flags.data.label_column
    schema = schemas.load_schema(rows.train, label_column, objective.kind, source, group.allgather)
    train_frame, eval_frame, eval_source = rows.train, rows.eval, flags.shared.eval_data
    if eval_frame is None:
        # The schema above saw the held-out rows too: their classes and categories count.
        train_frame, eval_frame = data.split_held_out(train_frame, rows.held_out)
        eval_frame = data.evaluation_rows(eval_frame, group)
        eval_source = source + float_range.HELD_OUT_SUFFIX
    x_train, y_train = schemas.encode(train_frame, schema, source)
    x_eval, y_eval = schemas.encode(eval_frame, schema, eval_source)
    objectives.check_metric_defined(metric_names[-1], y_eval, eval_source, schema.classes)
    total_rows = sum(group.allgather(len(y_train)))
    logger.info(
        f"Data: {total_rows} training rows (this replica: {len(y_train)}), {len(y_eval)} eval "
        f"rows (on every replica), {len(schema.feature_names)} features, {objective.name}, "
        f"read in {rows.seconds:.1f} s"
    )
    threads, num_class = flags.training.nthread or model.cpu_count(), schema.num_class
    params = model.params(
        flags.model, objective, metric_names, num_class, rows.device, threads, flags.shared.seed
    )
    # QuantileDMatrix bins the features once, without keeping a float copy for training.
    dtrain = xgb.QuantileDMatrix(
        x_train, label=y_train, max_bin=flags.model.max_bin, nthread=threads
    )
    deval = xgb.QuantileDMatrix(x_eval, label=y_eval, ref=dtrain, nthread=threads)
    fits = functools.partial(check_checkpoint, objective=objective, schema=schema)
    return Prepared(params, dtrain, deval, total_rows, rows.device, fits, (objective, schema))


def check_checkpoint(booster: xgb.Booster, objective, schema: schemas.Schema) -> None:
    """Raises ``ValueError`` when a checkpoint's booster does not fit this run's data."""
    learner = json.loads(booster.save_config())["learner"]
    saved = learner["objective"]["name"]
    if saved != objective.name:
        raise ValueError(f"it was trained for {saved}, this run is {objective.name}")
    if booster.num_features() != len(schema.feature_names):
        raise ValueError(
            f"it has {booster.num_features()} features, the data {len(schema.feature_names)}"
        )
    num_class = int(learner["learner_model_param"].get("num_class", 0))
    if num_class != schema.num_class and objective.kind == "multiclass":
        raise ValueError(f"it has {num_class} classes, the data {schema.num_class}")


def export(flags: Flags, prepared: Prepared, result: Result, model_dir: str) -> str:
    """``model.bst`` and the metadata a prediction client needs besides it: feature order,
    category codes and classes (the chief's, after training)."""
    objective, schema = prepared.about
    about = {
        "format": "model.bst: XGBoost UBJSON booster, no feature names; input rows are "
        "numbers in feature_names order, text features as their index in categories[name] "
        "(unknown or empty: null/NaN)",
        "xgboost_version": xgb.__version__,
        "objective": objective.name,
        "label_column": schema.label_column,
        "feature_names": schema.feature_names,
        "categories": schema.categories,
        "classes": schema.classes,
        "num_boosted_rounds": result.booster.num_boosted_rounds(),
        "best_iteration": result.best_iteration,
        "metric": {
            "name": result.metric,
            "value": result.value,
            "data": flags.shared.eval_data or "held-out rows",
        },
        "base_score": flags.model.base_score,
    }
    return model.export(result.booster, model_dir, about)
