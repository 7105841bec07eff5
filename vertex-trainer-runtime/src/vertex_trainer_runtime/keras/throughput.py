"""Training speed in every run's logs: examples/s and step time, and where the rest went.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). The chief reads the clock at
batch ends (never the step's logs: no extra device sync) less the checkpoint and evaluation time
``Timings`` records.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable

import tensorflow as tf
import tf_keras as keras

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"
EVALUATION = "evaluation"
# The epoch's means, added to its logs: TensorBoard's epoch_* curves, the Experiment run.
EPOCH_FIGURES = ("examples_per_second", "step_time_seconds")


class Timings:
    """Seconds spent outside the training steps, by kind (``CHECKPOINT``, ``EVALUATION``)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def measure(self, kind: str):
        started = self.clock()
        try:
            yield
        finally:
            self.seconds[kind] += self.clock() - started

    def timed(self, kind: str, function: Callable) -> Callable:
        """``function``, its calls measured as ``kind``."""

        def measured(*args, **kwargs):
            with self.measure(kind):
                return function(*args, **kwargs)

        return measured

    def total(self) -> float:
        return sum(self.seconds.values())


class Throughput(keras.callbacks.Callback):
    """Every ``every_steps`` steps and at each epoch's end: examples/s and mean step time, to
    the log and TensorBoard (``throughput/``); the epoch's means go into its logs
    (``EPOCH_FIGURES``) for the callbacks after it. The first step of each ``fit`` (tracing,
    XLA) is logged apart and left out of the means.
    """

    def __init__(
        self,
        global_batch: int,
        every_steps: int,
        timings: Timings,
        log_dir: str | None = None,
    ):
        super().__init__()
        # Keras may hand on_train_batch_end its tensors as they are: they are never read here.
        self._supports_tf_logs = True
        self.global_batch = global_batch
        self.every_steps = every_steps
        self.timings = timings
        self.log_dir = log_dir
        self._writer = None
        self.step = 0  # the global step after the last batch
        self.steps_measured = 0
        self.seconds_measured = 0.0
        self.first_steps_seconds = 0.0
        self.reports: list[dict[str, float]] = []  # every report's figures, for tests

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())  # once per fit
        self._started = self.timings.clock()
        self._mark = None  # (time, step, seconds outside steps) of the interval's start
        self._epoch_steps, self._epoch_seconds = 0, 0.0
        if self.log_dir and self._writer is None:
            self._writer = tf.summary.create_file_writer(f"{self.log_dir.rstrip('/')}/throughput")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_steps, self._epoch_seconds = 0, 0.0

    def on_train_batch_end(self, batch, logs=None):
        now = self.timings.clock()
        self.step += 1
        if self._mark is None:
            first = now - self._started
            self.first_steps_seconds += first
            logger.info("First step %.2f s (tracing and compiling the step function)", first)
            self._mark = (now, self.step, self.timings.total())
            return
        if self.step - self._mark[1] >= self.every_steps:
            self._report(now)

    def on_epoch_end(self, epoch, logs=None):
        if self._mark is not None and self.step > self._mark[1]:
            self._report(self.timings.clock())
        if self._epoch_steps and logs is not None:
            means = (
                self.global_batch * self._epoch_steps / self._epoch_seconds,
                self._epoch_seconds / self._epoch_steps,
            )
            logs.update(zip(EPOCH_FIGURES, means, strict=True))

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()

    def _report(self, now: float) -> None:
        started, start_step, outside = self._mark
        steps = self.step - start_step
        seconds = max(now - started - (self.timings.total() - outside), 1e-9)
        self._mark = (now, self.step, self.timings.total())
        figures = {
            "examples_per_second": self.global_batch * steps / seconds,
            "step_time_seconds": seconds / steps,
        }
        self.reports.append(figures)
        self.steps_measured += steps
        self.seconds_measured += seconds
        self._epoch_steps += steps
        self._epoch_seconds += seconds
        logger.info(
            "Step %d: %.1f examples/s, %.1f ms per step (mean of the last %d)",
            self.step,
            figures["examples_per_second"],
            1000 * figures["step_time_seconds"],
            steps,
        )
        if self._writer is not None:
            with self._writer.as_default(step=self.step):
                for name, value in figures.items():
                    tf.summary.scalar(name, value)

    def summary(self) -> dict[str, float]:
        """The run's totals: mean examples/s, seconds in steps, checkpoints and evaluation."""
        totals = {
            "training_seconds": self.seconds_measured + self.first_steps_seconds,
            "checkpoint_seconds": self.timings.seconds[CHECKPOINT],
            "evaluation_seconds": self.timings.seconds[EVALUATION],
        }
        if self.steps_measured:
            totals["examples_per_second"] = (
                self.global_batch * self.steps_measured / self.seconds_measured
            )
        return totals

    def log_summary(self) -> dict[str, float]:
        """One line at the end of the run (and to TensorBoard); returns ``summary()``."""
        totals = self.summary()
        logger.info(
            "Time: %.1f s in training steps (%s), %.1f s in checkpoints, %.1f s in evaluation",
            totals["training_seconds"],
            f"{totals['examples_per_second']:.1f} examples/s"
            if "examples_per_second" in totals
            else "too few steps to measure",
            totals["checkpoint_seconds"],
            totals["evaluation_seconds"],
        )
        if self._writer is not None:
            with self._writer.as_default(step=self.step):
                for name in ("checkpoint_seconds", "evaluation_seconds"):
                    tf.summary.scalar(f"total_{name}", totals[name])
            self._writer.flush()
        return totals
