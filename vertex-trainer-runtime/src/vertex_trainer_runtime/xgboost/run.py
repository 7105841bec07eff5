"""XGBoost's fixed order of a run: ``run(flags, ctx)``, which ``trainer/spec.py`` declares as its
``run``. The runtime's (``vertex_trainer_runtime.xgboost``): no user edits it.

The order: the notice (SIGTERM: save at the next round) and the exit before the VM stops ->
this replica's rows (``make_data``) -> the replicas join XGBoost's collective -> the matrices and
parameters (``make_model``) -> restore the newest complete checkpoint -> the checkpoint cadence
-> the round callbacks in XGBoost's order -> boost -> the final measurement -> the export
(``export``), on the chief only. The trainer's functions, named in its declaration
(``ctx.spec``), are called as:

- ``make_data(flags, cluster)``: this replica's rows, read before the replicas join;
- ``make_model(flags, rows, group)`` -> :class:`Prepared`: the data ready to boost;
- ``evaluate(booster, data, name, metric)`` -> the metric's value;
- ``export(flags, prepared, result, model_dir)``: the :class:`Result`'s model and metadata.

It reads these flags: ``shared.seed``, ``shared.checkpoint_minutes`` and the ``training``
section's ``num_boost_round``, ``early_stopping_rounds``, ``checkpoint_rounds`` and
``report_rounds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import xgboost as xgb

from vertex_trainer_runtime import preemption, tracking
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.spec import TrainerSpec
from vertex_trainer_runtime.xgboost import distributed, preemption_hook, resume, rounds, throughput

logger = logging.getLogger(__name__)

EVAL_NAME = "eval"  # the eval rows' name in XGBoost's logs: eval-<metric>


@dataclass
class Prepared:
    """What the trainer's ``make_model`` returns: the data ready to boost."""

    params: dict  # XGBoost's training parameters
    dtrain: xgb.DMatrix  # this replica's training rows
    deval: xgb.DMatrix  # the eval rows (all of them, on every replica)
    rows: int  # training rows of all replicas: the speed lines' rows/s
    device: str  # "cpu" or "cuda": on a GPU, checkpoints go by time
    # Raises ValueError when a restored booster does not fit the data (objective, features):
    # that checkpoint is skipped. None: any booster fits.
    check_checkpoint: Callable[[xgb.Booster], None] | None = None
    about: Any = None  # what the trainer's export reads besides (its schema, objective, ...)


@dataclass(frozen=True)
class Result:
    """What the run exports: the model and its last measurement."""

    booster: xgb.Booster  # the best round's model with early stopping, else the last
    rounds: int  # rounds trained
    metric: str  # the tuning metric id
    value: float  # its value on the eval rows
    best_iteration: int | None  # early stopping's best round (0-based); None without it


@dataclass(frozen=True)
class Reports:
    """Where the run's figures go: the tuning metric, the Experiment run, the speed log."""

    metric: Any  # hptune.MetricReporter
    experiment: tracking.Tracker
    speed: throughput.Throughput


def run(flags, ctx: RunContext) -> int:
    """Train, measure and export as the flags say; 0 when done."""
    notice = preemption.Notice().install()  # SIGTERM: save at the next round, then exit
    with preemption_hook.ExitBeforeTheVMStops(notice):  # ... and never outlive the VM
        return train_and_export(ctx.spec, flags, ctx, notice)


def tuning_metric(spec: TrainerSpec, flags) -> str:
    """The metric id reported for tuning with these flags (``spec.metric_for`` follows them)."""
    return spec.metric_for(flags)[0] if spec.metric_for is not None else spec.metric


def train_and_export(spec: TrainerSpec, flags, ctx: RunContext, notice) -> int:
    """The run: data, the collective, boosting, the final measurement and the export."""
    tag = tuning_metric(spec, flags)
    # File paths (gs:// through /gcs/), checked before any work.
    ctx.checkpoint_dir.local()
    model_dir = ctx.model_dir.local()
    cluster, started = ctx.cluster, time.monotonic()
    rows = spec.function("make_data")(flags, cluster)
    with distributed.group(cluster) as group:
        prepared = spec.function("make_model")(flags, rows, group)
        del rows  # the encoded, binned matrices replace the frames
        reports = Reports(
            ctx.metric_reporter(tag),  # the chief's: one file writer
            tracking.start(flags, cluster.is_chief, cluster.trial),  # job.experiment
            throughput.Throughput(prepared.rows),
        )
        evaluate = spec.function("evaluate")
        booster = train(flags, ctx, prepared, group, reports, notice, evaluate)
        result = measure(flags.training, booster, prepared, reports, evaluate)
        logger.info(
            f"Trained {result.rounds} rounds (model: {result.booster.num_boosted_rounds()}) "
            f"in {time.monotonic() - started:.1f} s on {prepared.device}; "
            f"{EVAL_NAME}-{tag}={result.value:.6g}"
        )
        if cluster.is_chief:
            spec.function("export")(flags, prepared, result, model_dir)
            reports.experiment.finish({tag: result.value})
        else:
            logger.info("Replica %d is not the chief: it does not export", group.rank)
    return 0


def train(flags, ctx: RunContext, prepared: Prepared, group, reports: Reports, notice, evaluate):
    """Restore, then boost the missing rounds with checkpoints; ``Preempted`` on a notice."""
    training, minutes = flags.training, flags.shared.checkpoint_minutes
    root, chief = ctx.checkpoint_dir.local(), ctx.cluster.is_chief
    start = resume.restore(root, group, training.num_boost_round, prepared.check_checkpoint)
    default = type(training)().checkpoint_rounds  # the flag's default: by time on a GPU
    every = resume.rounds_between_checkpoints(
        training.checkpoint_rounds, minutes, prepared.device, default
    )
    checkpointer = resume.Checkpointer(root, every, minutes, chief, reports.speed)
    callbacks = round_callbacks(flags, prepared, start, checkpointer, reports, evaluate)
    # Last: a round that another callback stops needs no agreement.
    callbacks.append(preemption_hook.StopOnNotice(notice, checkpointer, group.distributed))
    booster = boost(training, prepared, start, callbacks)
    preemption_hook.stopped_early(notice, booster, training.num_boost_round)
    return booster


def round_callbacks(flags, prepared, start, checkpointer, reports, evaluate) -> list:
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
        rounds.MetricReporter(
            reports.metric,
            evaluate,
            prepared.deval,
            EVAL_NAME,
            training.report_rounds,
            training.num_boost_round,
            reports.experiment,
            reports.speed,
        ),
        checkpointer,
    ]
    if rounds.samples(prepared.params):
        # Before anything else of a round: the round's samples depend on the seed and round only.
        callbacks.insert(0, rounds.SeedEachRound(flags.shared.seed))
    if training.early_stopping_rounds:
        stopping = rounds.ResumableEarlyStopping(
            training.early_stopping_rounds, reports.metric.tag, EVAL_NAME
        )
        callbacks.insert(0, stopping)
    return callbacks


def boost(training, prepared: Prepared, start, callbacks) -> xgb.Booster:
    """Boost the rounds still missing after ``start`` (a restored booster or None)."""
    done = start.num_boosted_rounds() if start is not None else 0
    if training.early_stopping_rounds and start is not None:
        state = rounds.restored_early_stopping(start)
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


def measure(training, booster: xgb.Booster, prepared: Prepared, reports: Reports, evaluate):
    """The model to export (the best round's with early stopping) and its metric, reported
    last (at the last round trained, the highest step), with the run's speed totals."""
    exported = booster
    stopping = rounds.restored_early_stopping(booster) if training.early_stopping_rounds else None
    if stopping is not None:
        exported = booster[: stopping[0] + 1]
    trained, speed, tag = booster.num_boosted_rounds(), reports.speed, reports.metric.tag
    with speed.timing("evaluation"):
        scored = rounds.configure(exported, prepared.params)
        value = evaluate(scored, prepared.deval, EVAL_NAME, tag)
    reports.metric.report(value, trained)
    if reports.metric.enabled and trained > speed.first_round:  # the chief's speed
        totals = speed.totals(trained)
        throughput.log_totals(speed, trained, totals)
        reports.experiment.log_evaluation(totals, trained)
    best = stopping[0] if stopping is not None else None
    return Result(exported, trained, tag, value, best)
