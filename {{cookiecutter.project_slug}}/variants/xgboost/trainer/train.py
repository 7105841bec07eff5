"""XGBoost on tabular data: flags, the training run, resume, tuning metric and export.

One run: read this replica's rows -> join the other replicas (if any) and agree on one schema
-> continue from the newest complete checkpoint (the chief's, sent to every replica) -> boost
the remaining rounds with periodic checkpoints and tuning-metric reports -> the chief exports
``model.bst`` and ``model_metadata.json`` to the model dir. Checkpoints: ``resume.py``.
"""

from __future__ import annotations

import argparse
import logging
import time

import pandas as pd
import xgboost as xgb
from vertex_trainer_runtime import cli, preemption, tracking
from vertex_trainer_runtime.context import RunContext

from trainer import data, distributed, model, objectives, resume, throughput
from trainer import schema as schemas
from trainer.preemption_hook import ExitBeforeTheVMStops, StopOnNotice, stopped_early

logger = logging.getLogger(__name__)

EVAL_NAME = "eval"


def run(args: argparse.Namespace, ctx: RunContext) -> int:
    notice = preemption.Notice().install()  # SIGTERM: save at the next round, then exit
    with ExitBeforeTheVMStops(notice):  # ... and never outlive the VM
        return train_and_export(args, ctx, notice)


def train_and_export(args: argparse.Namespace, ctx: RunContext, notice: preemption.Notice) -> int:
    """The run: data, the collective, resume, boosting, the final evaluation and the export."""
    objective = objectives.objective(args.objective)
    metric_names = objectives.metrics(args.eval_metric, objective.kind)
    tag = metric_names[-1]  # the HPT metric id; vertex.yaml's hpt.metric.id must equal it
    if not args.train_data:
        raise cli.InputError(
            "--train-data is required: a file, folder or glob (local, /gcs/ or gs://), "
            "bq://project.dataset.table or 'synthetic'"
        )
    # File paths (gs:// through /gcs/), checked before any work.
    checkpoint_dir, model_dir = ctx.checkpoint_dir.local(), ctx.model_dir.local()
    cluster = ctx.cluster
    device = model.device(args.device)
    shard = data.Shard(cluster.node_rank, cluster.num_nodes)
    read = {
        "label_column": args.label_column,
        "kind": objective.kind,
        "shard": shard,
        "seed": args.seed,
        "project": args.project,
    }
    started = time.monotonic()
    # Without --eval-data, rows chosen by --seed from all of --train-data are held out.
    hold_out = 0.0 if args.eval_data else args.eval_fraction
    train_frame, held_out = data.read_rows(args.train_data, "train", **read, hold_out=hold_out)
    # Every replica reads all eval rows: see evaluation_rows.
    eval_frame = (
        data.read(args.eval_data, "eval", **{**read, "shard": data.Shard()})
        if args.eval_data
        else None
    )
    read_s = time.monotonic() - started

    with distributed.group(cluster) as group:
        schema = schemas.load_schema(
            train_frame, args.label_column, objective.kind, args.train_data, group.allgather
        )
        if eval_frame is None:
            # The schema above saw the held-out rows too: their classes and categories count.
            train_frame, eval_frame = data.split_held_out(train_frame, held_out)
            eval_frame = evaluation_rows(eval_frame, group)
            eval_source = f"{args.train_data} (held-out rows)"
        else:
            eval_source = args.eval_data
        x_train, y_train = schemas.encode(train_frame, schema, args.train_data)
        x_eval, y_eval = schemas.encode(eval_frame, schema, eval_source)
        check_metric_defined(tag, y_eval, eval_source, schema.classes)
        rows = group.allgather(len(y_train))
        logger.info(
            "Data: %d training rows (this replica: %d), %d eval rows (on every replica), "
            "%d features, %s, read in %.1f s",
            sum(rows),
            len(y_train),
            len(y_eval),
            len(schema.feature_names),
            objective.name,
            read_s,
        )

        params = {
            "objective": objective.name,
            "tree_method": "hist",
            "device": device,
            "nthread": args.nthread or model.cpu_count(),
            "max_depth": args.max_depth,
            "eta": args.eta,
            "subsample": args.subsample,
            "colsample_bytree": args.colsample_bytree,
            "min_child_weight": args.min_child_weight,
            "max_bin": args.max_bin,
            "eval_metric": metric_names,
            "seed": args.seed,
        }
        if objective.kind == "multiclass":
            params["num_class"] = schema.num_class
        if args.base_score != "auto":
            params["base_score"] = args.base_score
        # QuantileDMatrix bins the features once, without keeping a float copy for training.
        dtrain = xgb.QuantileDMatrix(
            x_train, label=y_train, max_bin=args.max_bin, nthread=params["nthread"]
        )
        deval = xgb.QuantileDMatrix(x_eval, label=y_eval, ref=dtrain, nthread=params["nthread"])
        del x_train, x_eval

        reporter = ctx.metric_reporter(tag)  # the chief's: one file writer
        tracker = tracking.start(args, cluster.is_chief, cluster.trial)  # job.experiment
        start = resume.restore(checkpoint_dir, group, objective, schema, args.num_boost_round)
        speed = throughput.Throughput(sum(rows))
        booster = boost(
            args,
            params,
            dtrain,
            deval,
            start,
            checkpoint_dir,
            cluster,
            reporter,
            notice,
            tracker,
            speed,
        )
        stopped_early(notice, booster, args.num_boost_round)

        exported = booster
        stopping = resume.restored_early_stopping(booster) if args.early_stopping_rounds else None
        if stopping is not None:
            exported = booster[: stopping[0] + 1]
        # The study's last measurement is the exported model's metric. It is reported at the
        # last round trained, the highest step, so that it also comes last by step.
        preemption.drill_step_pause()  # drills only: the evaluation of a real model takes time
        with speed.timing("evaluation"):
            value = model.evaluate(model.configure(exported, params), deval, EVAL_NAME, tag)
        reporter.report(value, booster.num_boosted_rounds())
        if cluster.is_chief and booster.num_boosted_rounds() > speed.first_round:
            totals = speed.totals(booster.num_boosted_rounds())
            throughput.log_totals(speed, booster.num_boosted_rounds(), totals)
            tracker.log_evaluation(totals, booster.num_boosted_rounds())
        logger.info(
            "Trained %d rounds (model: %d) in %.1f s on %s; %s-%s=%.6g",
            booster.num_boosted_rounds(),
            exported.num_boosted_rounds(),
            time.monotonic() - started,
            device,
            EVAL_NAME,
            tag,
            value,
        )
        if cluster.is_chief:
            model.export(
                exported,
                model_dir,
                metadata(args, objective, schema, exported, tag, value, stopping),
            )
            tracker.finish({tag: value})
        else:
            logger.info("Replica %d is not the chief: it does not export", group.rank)
    return 0


def evaluation_rows(frame: pd.DataFrame, group: distributed.Group) -> pd.DataFrame:
    """The eval rows of all replicas, on every replica (rank order).

    XGBoost's distributed AUC and AUCPR are not those of the whole eval set: each replica
    ranks only its own rows and the per-replica areas are summed, weighted by each replica's
    positive x negative pairs (src/metric/auc.cc). Eval files that differ (by date, by region)
    then skew the metric that drives early stopping, tuning and the metadata. When every
    replica holds the same eval rows, that weighted mean of identical values is exact, and so
    is every summed metric (rmse, logloss, ...). The cost: each replica evaluates all eval rows.
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


def boost(
    args,
    params,
    dtrain,
    deval,
    start,
    checkpoint_dir,
    cluster,
    reporter,
    notice=None,
    tracker=None,
    speed=None,
) -> xgb.Booster:
    """Boost the rounds still missing after ``start``, with checkpoints and metric reports;
    on a preemption ``notice``, stop after the round all replicas agree on, saved. ``speed``
    (a ``throughput.Throughput``) times the rounds, checkpoints and evaluations."""
    done = start.num_boosted_rounds() if start is not None else 0
    remaining = args.num_boost_round - done
    speed = speed or throughput.Throughput(rows=dtrain.num_row())
    speed.start(done)
    checkpointer = resume.Checkpointer(
        checkpoint_dir, args.checkpoint_rounds, args.checkpoint_minutes, cluster.is_chief, speed
    )
    checkpointer.saved_at = done
    # Order matters: XGBoost calls a round's callbacks in list order and skips the rest once one
    # says stop. Early stopping goes first so that a checkpoint of round N already holds round
    # N's score (a restart from it then stops where an uninterrupted run does); on the round it
    # stops, the metric is reported and the checkpoint saved by the final steps instead.
    callbacks = [
        model.MetricReporter(
            reporter, deval, EVAL_NAME, args.report_rounds, args.num_boost_round, tracker, speed
        ),
        checkpointer,
    ]
    if notice is not None:  # last: a round that another callback stops needs no agreement
        callbacks.append(StopOnNotice(notice, checkpointer, cluster.is_distributed))
    if resume.samples(params):
        # Before anything else of a round: the round's samples depend on the seed and round only.
        callbacks.insert(0, resume.SeedEachRound(args.seed))
    if args.early_stopping_rounds:
        callbacks.insert(
            0, resume.ResumableEarlyStopping(args.early_stopping_rounds, reporter.tag, EVAL_NAME)
        )
        state = resume.restored_early_stopping(start) if start is not None else None
        if state is not None and done - 1 - state[0] >= args.early_stopping_rounds:
            logger.info("The checkpoint had already stopped early: nothing left to train")
            return start
    if remaining <= 0:
        logger.info("All %d rounds were done before this run", args.num_boost_round)
        return start
    logger.info(
        "Boosting rounds %d..%d of %d", done + 1, args.num_boost_round, args.num_boost_round
    )
    return xgb.train(
        params,
        dtrain,
        num_boost_round=remaining,
        # Early stopping needs the eval metric every round; otherwise MetricReporter computes
        # it every --report-rounds rounds only.
        evals=[(deval, EVAL_NAME)] if args.early_stopping_rounds else [],
        xgb_model=start,
        callbacks=callbacks,
        verbose_eval=False,
    )


def metadata(args, objective, schema, booster, tag, value, stopping) -> dict:
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
        "metric": {"name": tag, "value": value, "data": args.eval_data or "held-out rows"},
        "base_score": args.base_score,
    }
