"""Training speed in every run's logs: examples/s, step time, model TFLOPS and, on a GPU,
model-FLOPs use (MFU), and where the rest went.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). The chief reads the clock at
the batch ends that close an interval (never the step's logs: no extra device sync) and takes out
the checkpoint and evaluation time ``Timings`` records (``vertex_trainer_runtime.speed``). The
model's FLOPs per example are counted once, before the first step (``model_flops``); each
interval's go to the job ledger as the whole job's (the global batch), for ``make report``.
"""

from __future__ import annotations

import logging

import tensorflow as tf
import tf_keras as keras

from vertex_trainer_runtime import ledger, speed
from vertex_trainer_runtime.keras import model_flops

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"
EVALUATION = "evaluation"
# The epoch's means, added to its logs: TensorBoard's epoch_* curves, the Experiment run.
EPOCH_FIGURES = ("examples_per_second", "step_time_seconds")

# The steps' clock and the seconds spent outside them, by kind (``CHECKPOINT``, ``EVALUATION``):
# the checkpoint callback and the evaluation add to it (``timing``, ``timed``), ``Throughput``
# takes them out of the steps' time.
Timings = speed.IntervalTimer


class Throughput(keras.callbacks.Callback):
    """Every ``every_steps`` steps and at each epoch's end: examples/s and mean step time, to
    the log and TensorBoard (``throughput/``); the epoch's means go into its logs
    (``EPOCH_FIGURES``) for the callbacks after it. The first step of each ``fit`` (tracing,
    XLA) is logged apart and left out of the means. A model whose FLOPs cannot be counted
    reports no TFLOPS (``example_flops`` None).
    """

    def __init__(
        self,
        global_batch: int,
        every_steps: int,
        timings: Timings,
        log_dir: str | None = None,
        chief: bool = True,
    ):
        super().__init__()
        # Every task times its steps for its lane of the job ledger (its VM is paid too); only
        # the chief counts the model's FLOPs and logs the job's speed.
        self.chief = chief
        # Keras may hand on_train_batch_end its tensors as they are: they are never read here.
        self._supports_tf_logs = True
        self.global_batch = global_batch
        self.every_steps = every_steps
        self.timings = timings
        self.log_dir = log_dir
        self._writer = None
        self.step = 0  # the global step after the last batch
        self.measured = speed.Interval(0, 0.0)  # the reports' steps and seconds, all fits
        self.first_steps_seconds = 0.0
        self.reports: list[dict[str, float]] = []  # every report's figures, for tests
        self._ledger = ledger.current()
        self.example_flops: float | None = None  # forward and backward, from on_train_begin
        self.peak: float | None = None  # a GPU's dense peak TFLOPS, for the MFU
        self.replicas = 1  # the strategy's: the GPUs the global batch's FLOPs are shared by
        self._counted = False

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())  # once per fit
        self._ledger = ledger.current()  # its progress: an attribute set per step
        if not self._counted and self.chief:  # before the clock starts: start-up
            self._count_flops()
        self.timings.start(self.step)
        self._first_step_done = False
        self._epoch = speed.Interval(0, 0.0)
        if self.log_dir and self._writer is None:
            self._writer = tf.summary.create_file_writer(f"{self.log_dir.rstrip('/')}/throughput")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = speed.Interval(0, 0.0)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self._ledger.step = self.step
        if not self._first_step_done:
            first = self.timings.lap(self.step).seconds
            self.first_steps_seconds += first
            self._first_step_done = True
            if self.chief:
                self._record_flops(1)
                logger.info("First step %.2f s (tracing and compiling the step function)", first)
            return
        if self.step - self.timings.mark[1] >= self.every_steps:
            self._report()

    def on_epoch_end(self, epoch, logs=None):
        if self._first_step_done and self.step > self.timings.mark[1]:
            self._report()
        if self._epoch.steps and logs is not None:
            logs.update(self._figures(self._epoch))

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()

    def _count_flops(self) -> None:
        """The model's FLOPs per example and the GPU's peak, once for the run."""
        self._counted = True
        self.example_flops = model_flops.training_flops(self.model)
        strategy = getattr(self.model, "distribute_strategy", None)
        self.replicas = getattr(strategy, "num_replicas_in_sync", 1)
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            self.peak = speed.peak_tflops(details.get("device_name", ""))
        if self.example_flops is None:
            logger.info("Model FLOPs: not countable for this model, no TFLOPS reported")
            return
        logger.info(
            "Model FLOPs: %.3g per training step (%.3g per example, forward and backward)%s",
            self.example_flops * self.global_batch,
            self.example_flops,
            f"; GPU peak {self.peak:g} TFLOPS" if self.peak else "",
        )

    def _record_flops(self, steps: int) -> None:
        """The job's model FLOPs of ``steps`` steps, to the ledger (``make report`` totals)."""
        if self.example_flops is not None:
            flops = self.example_flops * self.global_batch * steps
            self._ledger.record("model_flops", flops=flops, steps=steps)

    def _figures(self, interval: speed.Interval) -> dict[str, float]:
        """``EPOCH_FIGURES`` of ``interval``: examples/s and mean step time."""
        return {
            "examples_per_second": interval.per_second(self.global_batch * interval.steps),
            "step_time_seconds": interval.seconds_per_step(),
        }

    def _report(self) -> None:
        lap = self.timings.lap(self.step).without_pauses()
        interval = speed.Interval(lap.steps, max(lap.seconds, 1e-9))
        if not self.chief:  # the lap is this task's steps in its ledger: nothing to log
            self.measured += interval
            self._epoch += interval
            return
        figures = self._figures(interval)
        self._record_flops(interval.steps)
        if self.example_flops is not None:
            flops = self.example_flops * self.global_batch * interval.steps
            figures["model_tflops"] = flops / interval.seconds / self.replicas / 1e12
            if self.peak:
                figures["mfu"] = figures["model_tflops"] / self.peak
        self.reports.append(figures)
        self.measured += interval
        self._epoch += interval
        logger.info(
            "Step %d: %.1f examples/s, %.1f ms per step (mean of the last %d)%s",
            self.step,
            figures["examples_per_second"],
            1000 * figures["step_time_seconds"],
            interval.steps,
            _described_flops(figures),
        )
        if self._writer is not None:
            with self._writer.as_default(step=self.step):
                for name, value in figures.items():
                    tf.summary.scalar(name, value)

    def summary(self) -> dict[str, float]:
        """The run's totals: mean examples/s, seconds in steps, checkpoints and evaluation."""
        totals = {
            "training_seconds": self.measured.seconds + self.first_steps_seconds,
            "checkpoint_seconds": self.timings.seconds[CHECKPOINT],
            "evaluation_seconds": self.timings.seconds[EVALUATION],
        }
        if self.measured.steps:
            totals["examples_per_second"] = self._figures(self.measured)["examples_per_second"]
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
                for name, value in ledger.figures().items():  # the job's goodput so far
                    tf.summary.scalar(f"goodput/{name}", value)
            self._writer.flush()
        return totals


def _described_flops(figures: dict[str, float]) -> str:
    """The speed line's model TFLOPS (per replica) and MFU, where they are known."""
    if "model_tflops" not in figures:
        return ""
    text = f", {figures['model_tflops']:.3g} model TFLOPS per replica"
    if "mfu" in figures:
        text += f" = {100 * figures['mfu']:.1f} % of peak"
    return text
