"""The Keras training state (weights, optimizer, where in the epochs) saved and restored with
complete markers.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``): what a checkpoint holds is
the model and its optimizer, whatever the trainer builds; their names (``ckpt``, the marker's
``epochs_done``, ``steps_into_epoch``, ``global_step``, ``precision``) stay as they are, so a
project resumes from the checkpoints of an older version. A step is one folder,
``checkpoint-<step>/``; when distributed each task writes its part, ``<task>-<index>/``
(``task_parts``): a step counts only when every task can resume from it. Every task saves and
restores at the same moments (batch-norm reads are collectives).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass

import tensorflow as tf
import tf_keras as keras

from vertex_trainer_runtime import checkpoints, cli, publisher
from vertex_trainer_runtime.keras import precision, throughput
from vertex_trainer_runtime.keras.distributed import Consensus
from vertex_trainer_runtime.keras.task_parts import TaskPublisher, Tasks

logger = logging.getLogger(__name__)

FILE_PREFIX = "ckpt"  # TensorFlow writes ckpt.index and ckpt.data-*


@dataclass(frozen=True)
class Position:
    """Where a checkpoint was taken: whole epochs done, then steps into the next epoch."""

    epochs_done: int = 0
    steps_into_epoch: int = 0


class TrainingState:
    """Save and restore ``model`` + optimizer under ``root``; epochs done go in the marker."""

    def __init__(
        self,
        model: keras.Model,
        root: str,
        consensus: Consensus,
        keep: int = 2,
        tasks: Tasks | None = None,
        policy: str = precision.FLOAT32,
        timings: throughput.Timings | None = None,
    ):
        self.model = model
        self.policy = policy  # the run's precision, noted in each checkpoint's marker
        self.timings = timings or throughput.Timings()
        self.root = root
        self.consensus = consensus
        self.tasks = tasks or Tasks()
        if self.tasks.part:
            self.publisher = TaskPublisher(root, self.tasks, keep=keep)
        else:
            self.publisher = publisher.Publisher(root, keep=keep)
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)

    def prefix(self, checkpoint_path: str) -> str:
        """This task's TensorFlow checkpoint prefix in a step's folder."""
        return os.path.join(checkpoint_path, self.tasks.part, FILE_PREFIX)

    def _validate(self, path: str) -> None:
        """Raises unless TensorFlow can read the checkpoint's index (catches truncated copies)."""
        tf.train.load_checkpoint(self.prefix(path))

    @property
    def step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def save(self, epochs_done: int, steps_into_epoch: int = 0) -> None:
        """Write locally; the publisher copies it to the checkpoint dir in the background,
        marker last, and keeps the newest ``keep``."""
        step = self.step
        metadata = {
            "epochs_done": epochs_done,
            "steps_into_epoch": steps_into_epoch,
            "global_step": step,
            "precision": self.policy,
        }
        with self.timings.timing(throughput.CHECKPOINT):
            local = tempfile.mkdtemp(prefix="keras-checkpoint-")
            try:
                self._checkpoint.write(os.path.join(local, FILE_PREFIX))
            except BaseException:
                shutil.rmtree(local, ignore_errors=True)
                raise
            self.publisher.submit(local, step, metadata)

    def close(self) -> None:
        """Wait until the last checkpoint is published (before the export and the exit)."""
        with self.timings.timing(throughput.CHECKPOINT):
            self.publisher.close()

    def restore(self) -> Position:
        """Restore the newest complete checkpoint all tasks have; return where it was taken."""
        chosen = self._agreed_checkpoint()
        if chosen is None:
            logger.info("No complete checkpoint in %s: starting from epoch 1", self.root)
            return Position()
        metadata = chosen.metadata()
        saved_with = metadata.get("precision", precision.FLOAT32)  # older ones: float32
        self._check_precision(chosen.path, saved_with)
        try:
            self._checkpoint.read(self.prefix(chosen.path)).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise cli.InputError(
                f"checkpoint {chosen.path} does not fit this model (were --model, --image-size "
                f"or the classes changed? use a new --checkpoint-dir): {error}"
            ) from None
        position = Position(
            int(metadata.get("epochs_done", 0)), int(metadata.get("steps_into_epoch", 0))
        )
        logger.info(
            "Resumed from %s (step %d, %d epochs done)%s",
            chosen.path,
            chosen.step,
            position.epochs_done,
            f" and {position.steps_into_epoch} steps of epoch {position.epochs_done + 1}"
            if position.steps_into_epoch
            else "",
        )
        return position

    def _agreed_checkpoint(self) -> checkpoints.Checkpoint | None:
        """The newest complete checkpoint every task has (None: train from scratch); newer
        folders are removed."""
        latest = checkpoints.latest_complete(self.root, validate=self._validate)
        mine = latest.step if latest else 0
        agreed = self.consensus.minimum(mine)
        chosen = latest
        if agreed != mine:
            # The same validation as for the newest one: a marked but unreadable copy is skipped.
            chosen = checkpoints.latest_complete(
                self.root, validate=self._validate, max_step=agreed
            )
            if chosen is not None and chosen.step != agreed:
                chosen = None
        missing = agreed > 0 and chosen is None
        if self.consensus.any(missing):
            logger.warning(
                "Not every task has a complete checkpoint at step %d; training from scratch",
                agreed,
            )
            agreed, chosen = 0, None
        # Newer folders (partial ones, or steps other tasks lack) belong to an abandoned run:
        # left in place, they would shadow the checkpoints this run is about to write.
        self._discard_after(agreed)
        return chosen

    def _check_precision(self, path: str, saved_with: str) -> None:
        """Checkpoints carry over between policies (variables are float32), except into
        mixed_float16, whose optimizer's loss scale the checkpoint lacks."""
        if saved_with == self.policy:
            return
        if self.policy == precision.MIXED_FLOAT16:
            raise cli.InputError(
                f"--precision {self.policy}: checkpoint {path} was saved with {saved_with}, "
                f"without the loss scale {self.policy} needs; resume with "
                f"--precision={saved_with}, or use a new --checkpoint-dir"
            )
        logger.info("Checkpoint saved with precision %s, resuming with %s", saved_with, self.policy)

    def _discard_after(self, step: int) -> None:
        if not self.tasks.is_chief:
            return  # the chief's: one writer per folder
        for checkpoint in checkpoints.list_checkpoints(self.root):
            if checkpoint.step > step:
                logger.info("Removing %s: newer than the resume point", checkpoint.path)
                shutil.rmtree(checkpoint.path, ignore_errors=True)


def use_learning_rate(optimizer, learning_rate: float) -> None:
    """--learning-rate wins over the value a restored checkpoint brought back."""
    restored = float(optimizer.learning_rate.numpy())
    if not math.isclose(restored, learning_rate, rel_tol=1e-6):
        logger.info(
            "Learning rate %g (--learning-rate), not the checkpoint's %g", learning_rate, restored
        )
    optimizer.learning_rate.assign(learning_rate)
