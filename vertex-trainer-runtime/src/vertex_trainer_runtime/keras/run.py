"""A Keras training run in its fixed order: the declaration's ``run(flags, ctx)``.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). The order is what keeps a
preemption safe, so it lives here rather than in the trainer: the strategy first (TensorFlow's
coordination service must exist before any other op, and installs a SIGTERM handler of its
own), then the preemption notice, the data, the model in the strategy's scope after the
precision policy, the restore of the training state, the watchdog, the callbacks in their
required order, the epochs (the rest of an interrupted one first), the last measurement, the
export on every task (a collective) kept on the chief.

What is the user's, the project's declaration (``ctx.spec``: ``SPEC`` of ``trainer/spec.py``)
names:
``make_data(flags, chief_first)`` -> the train and eval ``sources.Source``,
``make_model(flags, train_source)`` -> a compiled model, ``evaluate(model)`` ->
``evaluate(dataset, stop)`` -> results with ``loss`` and the metric (None once ``stop()``),
``export(model, train_source, path)``. The flags this reads: ``shared`` (``cli.SharedFlags``),
``training.batch_size`` (per replica), ``.epochs``, ``.steps_per_epoch`` (0: one pass),
``.learning_rate``, ``speed.precision`` and ``speed.logging_steps``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

# First: imports TensorFlow without its start-up noise.
from vertex_trainer_runtime.keras import quiet  # noqa: F401

# isort: split
import tf_keras as keras

from vertex_trainer_runtime import checkpoints, cli, preemption, spec, tracking
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.keras import (
    checkpoint_callback,
    distributed,
    evaluation,
    image_checks,
    passes,
    precision,
    sources,
    throughput,
    training_state,
)
from vertex_trainer_runtime.keras.task_parts import Tasks

logger = logging.getLogger(__name__)


def run(flags: Any, ctx: RunContext) -> int:
    """Train ``--epochs`` epochs from the newest complete checkpoint, evaluate each, export."""
    return run_declared(ctx.spec, flags, ctx)


@dataclass
class _Job:
    """What the steps of one run share."""

    declared: spec.TrainerSpec
    flags: Any
    ctx: RunContext
    strategy: Any
    notice: preemption.Notice
    consensus: distributed.Consensus
    tracker: Any
    timings: throughput.Timings

    @property
    def global_batch(self) -> int:
        return self.flags.training.batch_size * self.strategy.num_replicas_in_sync


def run_declared(declared: spec.TrainerSpec, flags: Any, ctx: RunContext) -> int:
    """:func:`run` with the user's functions of ``declared``."""
    for name in ("tensorflow", "absl"):  # they log every collective op at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    # The model dir and TensorBoard logs stay as given: TensorFlow writes gs:// URIs itself.
    checkpoint_dir = ctx.checkpoint_dir.local()
    job = _start(declared, flags, ctx)
    train_source, eval_source = _load_data(job)
    keras.utils.set_random_seed(flags.shared.seed)
    steps_per_epoch = flags.training.steps_per_epoch or passes.steps_per_pass(
        train_source.size, job.global_batch, job.strategy.num_replicas_in_sync
    )
    _log_setup(job, steps_per_epoch)
    policy = precision.apply(flags.speed.precision)
    with job.strategy.scope():  # the model's variables made in the strategy's scope
        model = declared.function("make_model")(flags, train_source)
    state, position = _restore(job, model, checkpoint_dir, policy)
    # From here on a replica exits at the latest 25 s after its SIGTERM, whatever holds it.
    checkpoint_callback.exit_if_notice_outlives(job.notice, state)
    results, totals = _train(
        job, model, state, position, steps_per_epoch, train_source, eval_source
    )
    export = declared.function("export")
    export_on_every_task(export, model, train_source, ctx.model_dir.uri, ctx.cluster)
    if results:  # the chief's: the exported model is the last epoch's
        job.tracker.finish({declared.metric: results[declared.metric], **totals})
    return 0


def _start(declared: spec.TrainerSpec, flags: Any, ctx: RunContext) -> _Job:
    """The strategy first (MultiWorkerMirroredStrategy before any other TensorFlow op), then
    the notice: installed after the strategy, whose coordination service installs TensorFlow's
    own SIGTERM handler (it only logs the signal). SIGTERM: save at the next agreed batch, then
    exit."""
    cluster = ctx.cluster
    strategy = distributed.make_strategy(cluster)
    notice = preemption.Notice().install()
    consensus = distributed.Consensus(strategy, cluster.is_distributed)
    tracker = tracking.start(flags, cluster.is_chief, cluster.trial)  # job.experiment: the chief
    return _Job(declared, flags, ctx, strategy, notice, consensus, tracker, throughput.Timings())


def _restore(job: _Job, model, checkpoint_dir: str, policy: str):
    """The training state of ``model`` and where its newest complete checkpoint, which every
    task has, was taken; --learning-rate wins over the checkpoint's."""
    # One folder per step; under MultiWorkerMirroredStrategy each task writes its own part.
    state = training_state.TrainingState(
        model,
        checkpoint_dir,
        job.consensus,
        tasks=Tasks.of(job.ctx.cluster),
        policy=policy,
        timings=job.timings,
    )
    position = state.restore()
    training_state.use_learning_rate(model.optimizer, job.flags.training.learning_rate)
    return state, position


def _train(job: _Job, model, state, position, steps_per_epoch: int, train_source, eval_source):
    """The callbacks in their order, the epochs left, the final checkpoint published: the last
    evaluation's results and, on the chief, the throughput totals."""
    flags, ctx, notice = job.flags, job.ctx, job.notice
    checkpointing = checkpoint_callback.CheckpointCallback(
        state, flags.shared.checkpoint_minutes, notice
    )
    evaluate = _evaluation(job, model, eval_source)
    board = ctx.tensorboard_dir.uri if ctx.cluster.is_chief else None
    speed = throughput.Throughput(
        job.global_batch, flags.speed.logging_steps, job.timings, board, chief=ctx.cluster.is_chief
    )
    callbacks = _callbacks(checkpointing, evaluate, speed, ctx)
    seed, epochs = flags.shared.seed, flags.training.epochs
    fit = _fitter(model, train_source, job.global_batch, seed, callbacks, notice, state)
    # An image that fails to decode, in training or evaluation: one line naming its file.
    with image_checks.name_the_unreadable_image(train_source, eval_source):
        _train_epochs(fit, position, epochs, steps_per_epoch, checkpointing, evaluate)
    state.close()
    _log_late_notice(notice)
    totals = speed.log_summary() if ctx.cluster.is_chief else {}
    return evaluate.results, totals


def _load_data(job: _Job) -> tuple[sources.Source, sources.Source]:
    """The user's train and eval sources, prepared on the chief first; or InputError."""
    chief_first = distributed.chief_first(job.consensus, job.ctx.cluster.is_chief)
    train_source, eval_source = job.declared.function("make_data")(job.flags, chief_first)
    logger.info("Training data: %s", train_source.description)
    logger.info("Eval data: %s", eval_source.description)
    if not eval_source.size:
        raise cli.InputError(f"--eval-data: no images to evaluate ({eval_source.description})")
    return train_source, eval_source


def _log_setup(job: _Job, steps_per_epoch: int) -> None:
    replicas, cluster, ctx = job.strategy.num_replicas_in_sync, job.ctx.cluster, job.ctx
    batch_size = job.flags.training.batch_size
    logger.info(
        "%s on %s: %d replica(s), global batch %d (%d per replica), %d steps per epoch",
        distributed.strategy_name(job.strategy),
        f"{cluster.task_type} {cluster.index}" if cluster.is_distributed else "one task",
        replicas,
        batch_size * replicas,
        batch_size,
        steps_per_epoch,
    )
    logger.info(
        "Outputs: model %s, checkpoints %s, TensorBoard %s",
        ctx.model_dir,
        ctx.checkpoint_dir,
        ctx.tensorboard_dir,
    )


def _evaluation(job: _Job, model, eval_source) -> evaluation.Evaluate:
    # The per-replica batch: the chief evaluates on one device.
    eval_images = sources.eval_dataset(eval_source, job.flags.training.batch_size)
    evaluate = job.declared.function("evaluate")(model)
    metric = job.declared.metric
    return evaluation.Evaluate(
        job.timings.timed(throughput.EVALUATION, lambda stop: evaluate(eval_images, stop)),
        metric,
        job.ctx.metric_reporter(metric),
        enabled=job.ctx.cluster.is_chief,
        epochs=job.flags.training.epochs,
        notice=job.notice,
        tracker=job.tracker,
    )


def _callbacks(checkpointing, evaluate, speed, ctx: RunContext) -> list:
    """The epoch's checkpoint is saved before its evaluation (a notice during a long evaluation
    finds it saved); the logs get val_* before TensorBoard writes them. The speed is measured
    first at each batch's end, before the other callbacks' work (on every task: its steps are
    its lane of the job ledger)."""
    if not ctx.cluster.is_chief:
        return [speed, checkpointing, evaluate]
    tensorboard = keras.callbacks.TensorBoard(
        log_dir=ctx.tensorboard_dir.uri, update_freq="epoch", profile_batch=0
    )
    return [speed, checkpointing, evaluate, tensorboard]


def _fitter(model, train_source, global_batch: int, seed: int, callbacks, notice, state):
    """``fit(initial_epoch, epochs, steps, start_step)``: train epochs ``initial_epoch + 1`` to
    ``epochs`` on the data from global step ``start_step`` on (the same data order, whichever
    attempt trains a step); raises ``Preempted`` once a notice stopped training."""

    def fit(initial_epoch: int, epochs: int, steps: int, start_step: int) -> None:
        model.fit(
            keras.utils.experimental.DatasetCreator(
                lambda context: passes.training_dataset(
                    train_source, context, global_batch, seed, start_step
                )
            ),
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps,
            callbacks=callbacks,
            verbose=2,
        )
        if notice.stopping:
            state.close()  # the checkpoint of the notice is published before the exit
            raise notice.preempted(f"{checkpoints.PREFIX}{state.step}")

    return fit


def _train_epochs(
    fit, position: training_state.Position, epochs, steps_per_epoch, checkpointing, evaluate
):
    """The rest of an epoch a timed checkpoint interrupted, then the remaining epochs."""
    epoch, done_steps = position.epochs_done, position.steps_into_epoch
    trained = False
    if done_steps and epoch < epochs:
        if done_steps < steps_per_epoch:
            logger.info(
                "Finishing epoch %d: %d of its %d steps remain",
                epoch + 1,
                steps_per_epoch - done_steps,
                steps_per_epoch,
            )
            checkpointing.steps_offset = done_steps
            fit(
                epoch, epoch + 1, steps_per_epoch - done_steps, epoch * steps_per_epoch + done_steps
            )
            trained = True
        epoch += 1
    if epoch < epochs:
        fit(epoch, epochs, steps_per_epoch, epoch * steps_per_epoch)
    elif not trained:
        # The last value reported must be the exported model's (vertex.yaml scores a trial by
        # its last measurement), and this attempt may run on a fresh VM: evaluate once more.
        logger.info("All %d epochs are done: evaluating and exporting only", epochs)
        evaluate.on_epoch_end(epochs - 1)


def _log_late_notice(notice: preemption.Notice) -> None:
    """After the last step the final checkpoint is complete, so evaluation and export go on;
    should they not fit in the grace, the watchdog exits and a rerun only exports."""
    if notice.received:
        logger.warning(
            "Preemption notice after the last step (%.1f s ago): final checkpoint complete, "
            "exporting",
            notice.seconds_since() or 0.0,
        )


def export_on_every_task(export, model, train_source, model_dir: str, cluster) -> None:
    """Every task calls ``export(model, train_source, path)`` (a collective under MWMS); only the
    chief's copy is kept, in ``model_dir``."""
    if cluster.is_chief:
        export(model, train_source, model_dir)
        logger.info("SavedModel written to %s", model_dir)
        return
    scratch = tempfile.mkdtemp(prefix=f"keras-{cluster.task_type}-{cluster.index}-model-")
    logger.info(
        "Exporting the %s copy of the model to %s (then removing it)", cluster.task_type, scratch
    )
    try:
        export(model, train_source, os.path.join(scratch, "model"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
