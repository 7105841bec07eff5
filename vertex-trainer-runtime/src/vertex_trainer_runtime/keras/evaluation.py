"""The chief's evaluation at each epoch's end: reported for tuning, stopped by a notice.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). How a model is evaluated is
the trainer's (its declaration's ``evaluate``); when, on which task, and what happens to the
results is this callback's: ``run`` puts it after the checkpoint callback, so an epoch's
checkpoint is saved before its evaluation, and before TensorBoard, which then writes val_*.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import tf_keras as keras

from vertex_trainer_runtime import hptune, tracking
from vertex_trainer_runtime.keras import throughput

logger = logging.getLogger(__name__)


class Evaluate(keras.callbacks.Callback):
    """At each epoch's end the chief alone evaluates every eval image once (Keras's own
    validation would pad or repeat per-worker batches), adds val_* to the epoch's logs, reports
    ``metric`` for tuning (global_step = epoch) and logs it, with the epoch's speed, to the
    Experiment run. A preemption notice stops an evaluation between two batches, except the
    last epoch's (the export needs it); the epoch's checkpoint is saved before it.
    """

    def __init__(
        self,
        evaluate: Callable,
        metric: str,
        reporter: hptune.MetricReporter,
        enabled: bool,
        epochs: int,
        notice=None,
        tracker: tracking.Tracker | None = None,
    ):
        super().__init__()
        self.evaluate = evaluate  # evaluate(stop) -> results, or None if stop() turned true
        self.metric = metric  # a key of the results: the tuning metric
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
        loss, metric = results["loss"], results[self.metric]
        logger.info("Epoch %d: eval loss = %.4f, %s = %.4f", epoch + 1, loss, self.metric, metric)
        self.reporter.report(metric, epoch + 1)
        pace = {name: logs[name] for name in throughput.EPOCH_FIGURES if name in (logs or {})}
        self.tracker.log_evaluation({**results, **pace}, epoch + 1)
        self.results = results
