"""Keras image classification: one code path for a laptop, one VM and a multi-worker job.

The distribution strategy follows the cluster (distributed.py): MultiWorkerMirroredStrategy when
TF_CONFIG names more than one training task, MirroredStrategy on one VM with several GPUs.
``model.fit`` runs with tf-keras (Keras 2), the multi-worker path TensorFlow tests; see model.py.
"""

from __future__ import annotations

import argparse
import logging
import math

# First: imports TensorFlow without its start-up noise (see quiet.py).
from trainer import quiet  # noqa: F401

# isort: split
import tf_keras as keras
from vertex_trainer_runtime import checkpoints, cli, hptune, preemption, tracking
from vertex_trainer_runtime.context import RunContext

from trainer import (
    checkpoint_callback,
    data,
    distributed,
    image_checks,
    model,
    passes,
    precision,
    resume,
    throughput,
)
from trainer.flags import DEFAULT_IMAGE_SIZE, SYNTHETIC_IMAGE_SIZE
from trainer.metric import METRIC

logger = logging.getLogger(__name__)


class Evaluate(keras.callbacks.Callback):
    """At the end of every epoch the chief evaluates on every eval image once, adds val_loss and
    val_accuracy to the epoch's logs (TensorBoard, history), reports the accuracy for
    hyperparameter tuning with global_step = epoch (1-based) and logs both to the Experiment run,
    with the epoch's examples/s and step time (``throughput.EPOCH_FIGURES``) when in the logs.

    Only the chief evaluates, on its own: other workers go on to the next epoch and wait for it
    at its first step. Keras's own validation would split the eval set into equal per-worker
    batches, which needs padding, repeated images or empty batches.

    A preemption notice during an evaluation other than the last one stops it between two
    batches (the epoch's checkpoint is saved before it): training goes on to the next step the
    tasks agree on the notice, saves it and exits, within the grace however long the evaluation.
    The last epoch's evaluation goes on: the export needs it, and the final checkpoint is
    already complete.
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
        logger.info(
            "Epoch %d: eval loss = %.4f, %s = %.4f",
            epoch + 1,
            results["loss"],
            METRIC,
            results[METRIC],
        )
        self.reporter.report(results[METRIC], epoch + 1)
        pace = {name: logs[name] for name in throughput.EPOCH_FIGURES if name in (logs or {})}
        self.tracker.log_evaluation({**results, **pace}, epoch + 1)
        self.results = results


def run(args: argparse.Namespace, ctx: RunContext) -> int:
    # TensorFlow logs every collective op and checkpoint shard at INFO: keep our lines readable.
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    cluster = ctx.cluster
    # The model dir and TensorBoard logs stay as given: TensorFlow writes gs:// URIs itself.
    checkpoint_dir = ctx.checkpoint_dir.local()
    strategy = distributed.make_strategy(cluster)
    # SIGTERM: save at the next agreed batch, then exit. Installed after the strategy, whose
    # coordination service installs TensorFlow's own SIGTERM handler (it only logs the signal).
    notice = preemption.Notice().install()
    consensus = resume.Consensus(strategy, cluster.is_distributed)
    tracker = tracking.start(args, cluster.is_chief, cluster.trial)  # job.experiment: the chief

    synthetic = (args.train_data or data.SYNTHETIC) == data.SYNTHETIC
    image_size = args.image_size or (SYNTHETIC_IMAGE_SIZE if synthetic else DEFAULT_IMAGE_SIZE)
    if args.model != model.SMALL_CNN and image_size < model.MIN_APPLICATION_SIZE:
        raise cli.InputError(
            f"--image-size {image_size}: {args.model} needs at least {model.MIN_APPLICATION_SIZE}"
        )
    train_source, eval_source = data.sources(
        args.train_data,
        args.eval_data,
        image_size,
        args.validation_split,
        args.seed,
        args.synthetic_examples,
        args.synthetic_classes,
        args.tfds_data_dir,
        distributed.chief_first(consensus, cluster.is_chief),
    )
    data.log_summary(train_source, eval_source)
    if not eval_source.size:
        raise cli.InputError(f"--eval-data: no images to evaluate ({eval_source.description})")

    keras.utils.set_random_seed(args.seed)
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    steps_per_epoch = args.steps_per_epoch or passes.steps_per_pass(
        train_source.size, global_batch, replicas
    )
    logger.info(
        "%s on %s: %d replica(s), global batch %d (%d per replica), %d steps per epoch",
        distributed.strategy_name(strategy),
        f"{cluster.task_type} {cluster.index}" if cluster.is_distributed else "one task",
        replicas,
        global_batch,
        args.batch_size,
        steps_per_epoch,
    )
    logger.info(
        "Outputs: model %s, checkpoints %s, TensorBoard %s",
        ctx.model_dir,
        ctx.checkpoint_dir,
        ctx.tensorboard_dir,
    )

    policy = precision.apply(args.precision)
    with strategy.scope():
        classifier = model.build(
            args.model,
            train_source.num_classes,
            image_size,
            args.weights,
            args.fine_tune,
            args.learning_rate,
            jit_compile=args.jit_compile,
        )
    timings = throughput.Timings()
    # One folder per step; under MultiWorkerMirroredStrategy each task writes its own part.
    state = resume.TrainingState(
        classifier,
        checkpoint_dir,
        consensus,
        tasks=resume.Tasks.of(cluster),
        policy=policy,
        timings=timings,
    )
    position = state.restore()
    _use_learning_rate(classifier.optimizer, args.learning_rate)
    # From here on a replica exits at the latest 25 s after its SIGTERM, whatever holds it.
    checkpoint_callback.exit_if_notice_outlives(notice, state)

    checkpointing = checkpoint_callback.CheckpointCallback(state, args.checkpoint_minutes, notice)
    # The per-replica batch: the chief evaluates on one device.
    eval_images = data.eval_dataset(eval_source, args.batch_size)
    evaluate = model.evaluator(classifier)
    evaluation = Evaluate(
        timings.timed(throughput.EVALUATION, lambda stop: evaluate(eval_images, stop)),
        ctx.metric_reporter(METRIC),
        enabled=cluster.is_chief,
        epochs=args.epochs,
        notice=notice,
        tracker=tracker,
    )
    speed = throughput.Throughput(
        global_batch, args.logging_steps, timings, ctx.tensorboard_dir.uri
    )
    # The epoch's checkpoint is saved before its evaluation (a notice during a long evaluation
    # finds it saved); the logs get val_* before TensorBoard writes them. The speed is
    # measured first at each batch's end, before the other callbacks' work.
    callbacks = [checkpointing, evaluation]
    if cluster.is_chief:
        callbacks.insert(0, speed)
        callbacks.append(
            keras.callbacks.TensorBoard(
                log_dir=ctx.tensorboard_dir.uri, update_freq="epoch", profile_batch=0
            )
        )

    def fit(initial_epoch: int, epochs: int, steps: int, start_step: int) -> None:
        """Train epochs ``initial_epoch + 1`` to ``epochs``, on the data from global step
        ``start_step`` on: the same data order, whichever attempt trains a step."""
        classifier.fit(
            keras.utils.experimental.DatasetCreator(
                lambda context: passes.training_dataset(
                    train_source, context, global_batch, args.seed, start_step
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

    # An image that fails to decode, in training or evaluation: one line naming its file.
    with image_checks.name_the_unreadable_image(train_source, eval_source):
        epoch, done_steps = position.epochs_done, position.steps_into_epoch
        trained = False
        if done_steps and epoch < args.epochs:
            if done_steps < steps_per_epoch:
                # A timed checkpoint inside an epoch: train only that epoch's remaining steps.
                logger.info(
                    "Finishing epoch %d: %d of its %d steps remain",
                    epoch + 1,
                    steps_per_epoch - done_steps,
                    steps_per_epoch,
                )
                checkpointing.steps_offset = done_steps
                fit(
                    epoch,
                    epoch + 1,
                    steps_per_epoch - done_steps,
                    epoch * steps_per_epoch + done_steps,
                )
                trained = True
            epoch += 1
        if epoch < args.epochs:
            fit(epoch, args.epochs, steps_per_epoch, epoch * steps_per_epoch)
        elif not trained:
            # The last value reported must be the exported model's (vertex.yaml scores a trial by
            # its last measurement), and this attempt may run on a fresh VM: evaluate once more.
            logger.info("All %d epochs are done: evaluating and exporting only", args.epochs)
            evaluation.on_epoch_end(args.epochs - 1)
    state.close()
    if notice.received:
        # After the last step: the final checkpoint is complete, so evaluation and export go
        # on; should they not fit in the grace, the watchdog exits and a rerun only exports.
        logger.warning(
            "Preemption notice after the last step (%.1f s ago): final checkpoint complete, "
            "exporting",
            notice.seconds_since() or 0.0,
        )
    totals = speed.log_summary() if cluster.is_chief else {}
    model.export_on_every_task(
        classifier, train_source.class_names, image_size, ctx.model_dir.uri, cluster
    )
    if evaluation.results:  # the chief's: the exported model is the last epoch's
        tracker.finish({METRIC: evaluation.results[METRIC], **totals})
    return 0


def _use_learning_rate(optimizer, learning_rate: float) -> None:
    """--learning-rate wins over the value a restored checkpoint brought back."""
    restored = float(optimizer.learning_rate.numpy())
    if not math.isclose(restored, learning_rate, rel_tol=1e-6):
        logger.info(
            "Learning rate %g (--learning-rate), not the checkpoint's %g", learning_rate, restored
        )
    optimizer.learning_rate.assign(learning_rate)
