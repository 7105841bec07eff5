"""The training loop: ``run(flags, ctx)`` builds the data, model and callbacks, trains, exports.

YOURS TO CHANGE: the steps of ``run`` (one code path for a laptop, one VM and a
multi-worker job); the generic parts are the runtime's ``vertex_trainer_runtime.keras``.
"""

from __future__ import annotations

import logging
import math

# First: imports TensorFlow without its start-up noise.
from vertex_trainer_runtime.keras import quiet  # noqa: F401

# isort: split
import tf_keras as keras
from vertex_trainer_runtime import checkpoints, cli, hptune, preemption, tracking
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.keras import (
    checkpoint_callback,
    distributed,
    image_checks,
    passes,
    precision,
    throughput,
)

from trainer import data, model, resume
from trainer.flags import PRECISIONS, Flags
from trainer.spec import SPEC

assert PRECISIONS == precision.PRECISIONS, "trainer/flags.py offers the policies precision applies"

logger = logging.getLogger(__name__)


class Evaluate(keras.callbacks.Callback):
    """At each epoch's end the chief alone evaluates every eval image once (Keras's own
    validation would pad or repeat per-worker batches), adds val_* to the epoch's logs, reports
    the metric for tuning (global_step = epoch) and logs it, with the epoch's speed, to the
    Experiment run. A preemption notice stops an evaluation between two batches, except the
    last epoch's (the export needs it); the epoch's checkpoint is saved before it.
    """

    def __init__(
        self,
        evaluate,
        reporter: hptune.MetricReporter,
        enabled: bool,
        epochs: int,
        notice=None,
        tracker: tracking.Tracker | None = None,
    ):
        super().__init__()
        self.evaluate = evaluate  # evaluate(stop) -> results, or None if stop() turned true
        self.reporter = reporter
        self.enabled = enabled
        self.epochs = epochs
        self.notice = notice
        self.tracker = tracker or tracking.NoTracker()
        self.results: dict = {}  # the last evaluation's

    def on_epoch_end(self, epoch, logs=None):
        if not self.enabled or (self.notice is not None and self.notice.stopping):
            return
        final = epoch + 1 >= self.epochs
        stop = None if final or self.notice is None else (lambda: self.notice.received)
        results = self.evaluate(stop)
        if results is None:
            logger.warning(
                "Preemption notice during the evaluation of epoch %d: evaluation stopped "
                "(the epoch's checkpoint is saved; the next agreed step is saved too)",
                epoch + 1,
            )
            return
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in results.items()})
        loss, metric = results["loss"], results[SPEC.metric]
        logger.info("Epoch %d: eval loss = %.4f, %s = %.4f", epoch + 1, loss, SPEC.metric, metric)
        self.reporter.report(results[SPEC.metric], epoch + 1)
        pace = {name: logs[name] for name in throughput.EPOCH_FIGURES if name in (logs or {})}
        self.tracker.log_evaluation({**results, **pace}, epoch + 1)
        self.results = results


def run(flags: Flags, ctx: RunContext) -> int:
    """Train ``--epochs`` epochs from the newest complete checkpoint, evaluate each, export."""
    for name in ("tensorflow", "absl"):  # they log every collective op at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    cluster = ctx.cluster
    # The model dir and TensorBoard logs stay as given: TensorFlow writes gs:// URIs itself.
    checkpoint_dir = ctx.checkpoint_dir.local()
    strategy = distributed.make_strategy(cluster)
    # SIGTERM: save at the next agreed batch, then exit. Installed after the strategy, whose
    # coordination service installs TensorFlow's own SIGTERM handler (it only logs the signal).
    notice = preemption.Notice().install()
    consensus = distributed.Consensus(strategy, cluster.is_distributed)
    tracker = tracking.start(flags, cluster.is_chief, cluster.trial)  # job.experiment: the chief
    train_source, eval_source, image_size = _load_data(flags, consensus, cluster)
    keras.utils.set_random_seed(flags.shared.seed)
    global_batch = flags.training.batch_size * strategy.num_replicas_in_sync
    steps_per_epoch = flags.training.steps_per_epoch or passes.steps_per_pass(
        train_source.size, global_batch, strategy.num_replicas_in_sync
    )
    _log_setup(strategy, ctx, flags.training.batch_size, steps_per_epoch)
    policy = precision.apply(flags.speed.precision)
    classifier = _build_model(flags, strategy, train_source.num_classes, image_size)
    timings = throughput.Timings()
    # One folder per step; under MultiWorkerMirroredStrategy each task writes its own part.
    tasks = resume.Tasks.of(cluster)
    state = resume.TrainingState(
        classifier, checkpoint_dir, consensus, tasks=tasks, policy=policy, timings=timings
    )
    position = state.restore()
    _use_learning_rate(classifier.optimizer, flags.training.learning_rate)
    # From here on a replica exits at the latest 25 s after its SIGTERM, whatever holds it.
    checkpoint_callback.exit_if_notice_outlives(notice, state)
    checkpointing = checkpoint_callback.CheckpointCallback(
        state, flags.shared.checkpoint_minutes, notice
    )
    evaluation = _evaluation(classifier, eval_source, flags, ctx, notice, tracker, timings)
    board = ctx.tensorboard_dir.uri if cluster.is_chief else None
    speed = throughput.Throughput(
        global_batch, flags.speed.logging_steps, timings, board, chief=cluster.is_chief
    )
    callbacks = _callbacks(checkpointing, evaluation, speed, ctx)
    fit = _fitter(
        classifier, train_source, global_batch, flags.shared.seed, callbacks, notice, state
    )
    # An image that fails to decode, in training or evaluation: one line naming its file.
    with image_checks.name_the_unreadable_image(train_source, eval_source):
        _train_epochs(
            fit, position, flags.training.epochs, steps_per_epoch, checkpointing, evaluation
        )
    state.close()
    _log_late_notice(notice)
    totals = speed.log_summary() if cluster.is_chief else {}
    model.export_on_every_task(
        classifier, train_source.class_names, image_size, ctx.model_dir.uri, cluster
    )
    if evaluation.results:  # the chief's: the exported model is the last epoch's
        tracker.finish({SPEC.metric: evaluation.results[SPEC.metric], **totals})
    return 0


def _build_model(flags: Flags, strategy, num_classes: int, image_size: int):
    """The compiled classifier, its variables made in the strategy's scope."""
    with strategy.scope():
        return model.build(
            flags.model,
            num_classes,
            image_size,
            flags.training.learning_rate,
            jit_compile=flags.speed.jit_compile,
        )


def _load_data(flags: Flags, consensus: distributed.Consensus, cluster) -> tuple:
    """The train and eval sources (``data.Source``) and the image size, or InputError."""
    synthetic = (flags.shared.train_data or data.SYNTHETIC) == data.SYNTHETIC
    image_size = flags.model.image_side(synthetic)
    if flags.model.model != model.SMALL_CNN and image_size < model.MIN_APPLICATION_SIZE:
        raise cli.InputError(
            f"--image-size {image_size}: {flags.model.model} needs at least "
            f"{model.MIN_APPLICATION_SIZE}"
        )
    chief_first = distributed.chief_first(consensus, cluster.is_chief)
    train_source, eval_source = data.sources(flags.shared, flags.data, image_size, chief_first)
    logger.info("Training data: %s", train_source.description)
    logger.info("Eval data: %s", eval_source.description)
    if not eval_source.size:
        raise cli.InputError(f"--eval-data: no images to evaluate ({eval_source.description})")
    return train_source, eval_source, image_size


def _log_setup(strategy, ctx: RunContext, batch_size: int, steps_per_epoch: int) -> None:
    replicas, cluster = strategy.num_replicas_in_sync, ctx.cluster
    logger.info(
        "%s on %s: %d replica(s), global batch %d (%d per replica), %d steps per epoch",
        distributed.strategy_name(strategy),
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


def _evaluation(classifier, eval_source, flags: Flags, ctx, notice, tracker, timings) -> Evaluate:
    # The per-replica batch: the chief evaluates on one device.
    eval_images = data.eval_dataset(eval_source, flags.training.batch_size)
    evaluate = model.evaluator(classifier)
    return Evaluate(
        timings.timed(throughput.EVALUATION, lambda stop: evaluate(eval_images, stop)),
        ctx.metric_reporter(SPEC.metric),
        enabled=ctx.cluster.is_chief,
        epochs=flags.training.epochs,
        notice=notice,
        tracker=tracker,
    )


def _callbacks(checkpointing, evaluation, speed, ctx: RunContext) -> list:
    """The epoch's checkpoint is saved before its evaluation (a notice during a long evaluation
    finds it saved); the logs get val_* before TensorBoard writes them. The speed is measured
    first at each batch's end, before the other callbacks' work (on every task: its steps are
    its lane of the job ledger)."""
    if not ctx.cluster.is_chief:
        return [speed, checkpointing, evaluation]
    tensorboard = keras.callbacks.TensorBoard(
        log_dir=ctx.tensorboard_dir.uri, update_freq="epoch", profile_batch=0
    )
    return [speed, checkpointing, evaluation, tensorboard]


def _fitter(classifier, train_source, global_batch: int, seed: int, callbacks, notice, state):
    """``fit(initial_epoch, epochs, steps, start_step)``: train epochs ``initial_epoch + 1`` to
    ``epochs`` on the data from global step ``start_step`` on (the same data order, whichever
    attempt trains a step); raises ``Preempted`` once a notice stopped training."""

    def fit(initial_epoch: int, epochs: int, steps: int, start_step: int) -> None:
        classifier.fit(
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
    fit, position: resume.Position, epochs, steps_per_epoch, checkpointing, evaluation
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
        evaluation.on_epoch_end(epochs - 1)


def _log_late_notice(notice: preemption.Notice) -> None:
    """After the last step the final checkpoint is complete, so evaluation and export go on;
    should they not fit in the grace, the watchdog exits and a rerun only exports."""
    if notice.received:
        logger.warning(
            "Preemption notice after the last step (%.1f s ago): final checkpoint complete, "
            "exporting",
            notice.seconds_since() or 0.0,
        )


def _use_learning_rate(optimizer, learning_rate: float) -> None:
    """--learning-rate wins over the value a restored checkpoint brought back."""
    restored = float(optimizer.learning_rate.numpy())
    if not math.isclose(restored, learning_rate, rel_tol=1e-6):
        logger.info(
            "Learning rate %g (--learning-rate), not the checkpoint's %g", learning_rate, restored
        )
    optimizer.learning_rate.assign(learning_rate)
