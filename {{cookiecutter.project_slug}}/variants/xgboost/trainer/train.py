"""YOURS TO CHANGE: the training run, one named step each: read the rows -> join the replicas and
agree on one schema -> resume from the newest complete checkpoint -> boost -> evaluate -> export.

The booster's parameters are ``model.params``; checkpoints and resume are ``resume.py``.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xgboost as xgb
from vertex_trainer_runtime import cli, hptune, preemption, tracking
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.xgboost import distributed, float_range, preemption_hook, throughput

from trainer import data, model, objectives, resume
from trainer import schema as schemas
from trainer.flags import Flags, Training

logger = logging.getLogger(__name__)

EVAL_NAME = "eval"


@dataclass
class Rows:
    """This replica's rows as read: training rows, which of them are held out, eval rows."""

    train: pd.DataFrame
    held_out: np.ndarray
    eval: pd.DataFrame | None  # None: evaluate on the held-out rows
    seconds: float


@dataclass
class Prepared:
    """The data ready to boost: the agreed schema, the booster's parameters, the matrices."""

    schema: schemas.Schema
    params: dict
    dtrain: xgb.QuantileDMatrix
    deval: xgb.QuantileDMatrix
    rows: int  # training rows of all replicas


@dataclass(frozen=True)
class Reports:
    """Where the run's figures go: the tuning metric, the Experiment run, the speed log."""

    metric: hptune.MetricReporter
    experiment: tracking.Tracker
    speed: throughput.Throughput


def run(flags: Flags, ctx: RunContext) -> int:
    notice = preemption.Notice().install()  # SIGTERM: save at the next round, then exit
    with preemption_hook.ExitBeforeTheVMStops(notice):  # ... and never outlive the VM
        return train_and_export(flags, ctx, notice)


def train_and_export(flags: Flags, ctx: RunContext, notice: preemption.Notice) -> int:
    """The run: data, the collective, resume, boosting, the final evaluation and the export."""
    objective = objectives.objective(flags.model.objective)
    metric_names = objectives.metrics(flags.training.eval_metric, objective.kind)
    tag = metric_names[-1]  # the HPT metric id; vertex.yaml's hpt.metric.id must equal it
    if not flags.shared.train_data:
        raise cli.InputError(
            "--train-data is required: a file, folder or glob (local, /gcs/ or gs://), "
            "bq://project.dataset.table or 'synthetic'"
        )
    # File paths (gs:// through /gcs/), checked before any work.
    checkpoint_dir, model_dir = ctx.checkpoint_dir.local(), ctx.model_dir.local()
    cluster, started = ctx.cluster, time.monotonic()
    device = model.device(flags.training.device)
    rows = read_rows(flags, objective.kind, data.Shard(cluster.node_rank, cluster.num_nodes))
    with distributed.group(cluster) as group:
        prepared = prepare(flags, rows, objective, metric_names, device, group)
        del rows  # the encoded, binned matrices replace the frames
        reports = Reports(
            ctx.metric_reporter(tag),  # the chief's: one file writer
            tracking.start(flags, cluster.is_chief, cluster.trial),  # job.experiment
            throughput.Throughput(prepared.rows),
        )
        training, minutes = flags.training, flags.shared.checkpoint_minutes
        start = resume.restore(
            checkpoint_dir, group, objective, prepared.schema, training.num_boost_round
        )
        every = resume.rounds_between_checkpoints(training.checkpoint_rounds, minutes, device)
        checkpointer = resume.Checkpointer(
            checkpoint_dir, every, minutes, cluster.is_chief, reports.speed
        )
        callbacks = round_callbacks(flags, prepared, start, checkpointer, reports)
        # Last: a round that another callback stops needs no agreement.
        callbacks.append(preemption_hook.StopOnNotice(notice, checkpointer, cluster.is_distributed))
        booster = boost(training, prepared, start, callbacks)
        preemption_hook.stopped_early(notice, booster, training.num_boost_round)
        exported, value, stopping = evaluate(training, booster, prepared, reports)
        logger.info(
            f"Trained {booster.num_boosted_rounds()} rounds (model: "
            f"{exported.num_boosted_rounds()}) in {time.monotonic() - started:.1f} s on "
            f"{device}; {EVAL_NAME}-{tag}={value:.6g}"
        )
        if cluster.is_chief:
            about = metadata(flags, objective, prepared.schema, exported, tag, value, stopping)
            model.export(exported, model_dir, about)
            reports.experiment.finish({tag: value})
        else:
            logger.info("Replica %d is not the chief: it does not export", group.rank)
    return 0


def read_rows(flags: Flags, kind: str, shard: data.Shard) -> Rows:
    """This replica's training rows and, with ``--eval-data``, all eval rows (every replica
    reads them all: see evaluation_rows). Without it, ``--eval-fraction`` of the training rows,
    chosen by ``--seed`` from all of ``--train-data``, are held out."""
    started = time.monotonic()
    shared, options = flags.shared, flags.data
    read = functools.partial(
        data.read_rows,
        label_column=options.label_column,
        kind=kind,
        seed=shared.seed,
        project=options.project,
    )
    hold_out = 0.0 if shared.eval_data else options.eval_fraction
    train, held_out = read(shared.train_data, "train", shard=shard, hold_out=hold_out)
    evaluation = read(shared.eval_data, "eval")[0] if shared.eval_data else None
    return Rows(train, held_out, evaluation, time.monotonic() - started)


def prepare(flags: Flags, rows: Rows, objective, metric_names, device, group) -> Prepared:
    """Agree on the schema with the other replicas, encode the rows and bin them once."""
    source = flags.shared.train_data
    label_column = flags.data.label_column
    schema = schemas.load_schema(rows.train, label_column, objective.kind, source, group.allgather)
    train_frame, eval_frame = rows.train, rows.eval
    eval_source = flags.shared.eval_data
    if eval_frame is None:
        # The schema above saw the held-out rows too: their classes and categories count.
        train_frame, eval_frame = data.split_held_out(train_frame, rows.held_out)
        eval_frame = evaluation_rows(eval_frame, group)
        eval_source = source + float_range.HELD_OUT_SUFFIX
    x_train, y_train = schemas.encode(train_frame, schema, source)
    x_eval, y_eval = schemas.encode(eval_frame, schema, eval_source)
    check_metric_defined(metric_names[-1], y_eval, eval_source, schema.classes)
    total_rows = sum(group.allgather(len(y_train)))
    logger.info(
        f"Data: {total_rows} training rows (this replica: {len(y_train)}), {len(y_eval)} eval "
        f"rows (on every replica), {len(schema.feature_names)} features, {objective.name}, "
        f"read in {rows.seconds:.1f} s"
    )
    threads = flags.training.nthread or model.cpu_count()
    seed, num_class = flags.shared.seed, schema.num_class
    params = model.params(flags.model, objective, metric_names, num_class, device, threads, seed)
    # QuantileDMatrix bins the features once, without keeping a float copy for training.
    max_bin = flags.model.max_bin
    dtrain = xgb.QuantileDMatrix(x_train, label=y_train, max_bin=max_bin, nthread=threads)
    deval = xgb.QuantileDMatrix(x_eval, label=y_eval, ref=dtrain, nthread=threads)
    return Prepared(schema, params, dtrain, deval, total_rows)


def evaluation_rows(frame: pd.DataFrame, group: distributed.Group) -> pd.DataFrame:
    """The eval rows of all replicas, on every replica (rank order).

    XGBoost's distributed AUC/AUCPR is a mean of each replica's own area weighted by its
    positive x negative pairs (src/metric/auc.cc), not the eval set's: skewed when the replicas'
    eval rows differ. With the same rows everywhere it is exact, as is every summed metric.
    """
    if not group.distributed:
        return frame
    return pd.concat(group.allgather(frame), ignore_index=True)


def check_metric_defined(metric: str, labels, source: str, classes: list | None) -> None:
    """AUC of eval rows that all have one class is undefined (XGBoost reports NaN, which a
    tuning trial cannot use): stop before training instead."""
    if metric.partition("@")[0] in ("auc", "aucpr") and len(set(labels.tolist())) < 2:
        only = classes[int(labels[0])] if classes else labels[0]
        raise cli.InputError(
            f"{source}: the label column has one class ({only!r}) in all eval rows, so "
            f"{metric} is undefined (e.g. eval rows of both classes)"
        )


def round_callbacks(flags: Flags, prepared: Prepared, start, checkpointer, reports) -> list:
    """What runs after each round, in XGBoost's order (it skips the rest once one says stop).

    Early stopping goes first so that a checkpoint of round N already holds round N's score (a
    restart from it then stops where an uninterrupted run does); on the round it stops, the
    metric is reported and the checkpoint saved by the final steps instead.
    """
    training = flags.training
    done = start.num_boosted_rounds() if start is not None else 0
    checkpointer.saved_at = done
    reports.speed.start(done)
    callbacks = [
        model.MetricReporter(
            reports.metric,
            prepared.deval,
            EVAL_NAME,
            training.report_rounds,
            training.num_boost_round,
            reports.experiment,
            reports.speed,
        ),
        checkpointer,
    ]
    if resume.samples(prepared.params):
        # Before anything else of a round: the round's samples depend on the seed and round only.
        callbacks.insert(0, resume.SeedEachRound(flags.shared.seed))
    if training.early_stopping_rounds:
        callbacks.insert(
            0,
            resume.ResumableEarlyStopping(
                training.early_stopping_rounds, reports.metric.tag, EVAL_NAME
            ),
        )
    return callbacks


def boost(training: Training, prepared: Prepared, start, callbacks) -> xgb.Booster:
    """Boost the rounds still missing after ``start`` (a restored booster or None)."""
    done = start.num_boosted_rounds() if start is not None else 0
    if training.early_stopping_rounds and start is not None:
        state = resume.restored_early_stopping(start)
        if state is not None and done - 1 - state[0] >= training.early_stopping_rounds:
            logger.info("The checkpoint had already stopped early: nothing left to train")
            return start
    total = training.num_boost_round
    if total - done <= 0:
        logger.info("All %d rounds were done before this run", total)
        return start
    logger.info("Boosting rounds %d..%d of %d", done + 1, total, total)
    return xgb.train(
        prepared.params,
        prepared.dtrain,
        num_boost_round=total - done,
        # Early stopping needs the eval metric every round; otherwise MetricReporter computes
        # it every --report-rounds rounds only.
        evals=[(prepared.deval, EVAL_NAME)] if training.early_stopping_rounds else [],
        xgb_model=start,
        callbacks=callbacks,
        verbose_eval=False,
    )


def evaluate(training: Training, booster: xgb.Booster, prepared: Prepared, reports: Reports):
    """The model to export (the best round's with early stopping), its metric, reported last
    (at the last round trained, the highest step), and the early-stopping state."""
    exported = booster
    stopping = resume.restored_early_stopping(booster) if training.early_stopping_rounds else None
    if stopping is not None:
        exported = booster[: stopping[0] + 1]
    rounds, speed = booster.num_boosted_rounds(), reports.speed
    with speed.timing("evaluation"):
        scored = model.configure(exported, prepared.params)
        value = model.evaluate(scored, prepared.deval, EVAL_NAME, reports.metric.tag)
    reports.metric.report(value, rounds)
    if reports.metric.enabled and rounds > speed.first_round:  # the chief's speed
        totals = speed.totals(rounds)
        throughput.log_totals(speed, rounds, totals)
        reports.experiment.log_evaluation(totals, rounds)
    return exported, value, stopping


def metadata(flags: Flags, objective, schema, booster, tag, value, stopping) -> dict:
    """What a prediction client needs besides model.bst: feature order, codes and classes."""
    return {
        "format": "model.bst: XGBoost UBJSON booster, no feature names; input rows are "
        "numbers in feature_names order, text features as their index in categories[name] "
        "(unknown or empty: null/NaN)",
        "xgboost_version": xgb.__version__,
        "objective": objective.name,
        "label_column": schema.label_column,
        "feature_names": schema.feature_names,
        "categories": schema.categories,
        "classes": schema.classes,
        "num_boosted_rounds": booster.num_boosted_rounds(),
        "best_iteration": stopping[0] if stopping else None,
        "metric": {"name": tag, "value": value, "data": flags.shared.eval_data or "held-out rows"},
        "base_score": flags.model.base_score,
    }
