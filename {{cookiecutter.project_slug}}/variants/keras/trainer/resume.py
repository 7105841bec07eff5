"""Keras training state (weights, optimizer, epoch) saved with the complete-marker protocol.

Every task saves and restores at the same moments because, under MultiWorkerMirroredStrategy,
reading batch-norm statistics for a checkpoint is a collective operation. Each task has its
own checkpoint folder (``<checkpoint_dir>/<task>-<index>`` when distributed): workers never write
the same files, and on restart all tasks agree on the newest step every one of them completed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass

import tensorflow as tf
import tf_keras as keras

from trainer import checkpoints, cli, publisher

logger = logging.getLogger(__name__)

FILE_PREFIX = "ckpt"  # TensorFlow writes ckpt.index and ckpt.data-*
# Under MultiWorkerMirroredStrategy the workers agree on "a time-based save is due" with a tiny
# collective; doing that on every batch would add a round trip per step.
AGREE_EVERY_BATCHES = 10


class Consensus:
    """Lets all tasks of a multi-worker job decide the same thing (no-op on one task)."""

    def __init__(self, strategy: tf.distribute.Strategy, distributed: bool):
        self.strategy = strategy
        self.distributed = distributed

    def gather(self, value: int) -> list[int]:
        """``value`` from every replica of every task (just ``[value]`` when not distributed)."""
        if not self.distributed:
            return [value]
        per_replica = self.strategy.run(lambda: tf.constant([value], tf.int64))
        return [int(v) for v in self.strategy.gather(per_replica, axis=0).numpy()]

    def any(self, flag: bool) -> bool:
        return any(self.gather(int(flag)))

    def minimum(self, value: int) -> int:
        return min(self.gather(value))


@dataclass(frozen=True)
class Position:
    """Where a checkpoint was taken: whole epochs done, then steps into the next epoch."""

    epochs_done: int = 0
    steps_into_epoch: int = 0


def _validate(path: str) -> None:
    """Raises unless TensorFlow can read the checkpoint's index (catches truncated copies)."""
    tf.train.load_checkpoint(os.path.join(path, FILE_PREFIX))


class TrainingState:
    """Save and restore ``model`` + optimizer under ``root``; epochs done go in the marker."""

    def __init__(self, model: keras.Model, root: str, consensus: Consensus, keep: int = 2):
        self.model = model
        self.root = root
        self.consensus = consensus
        self.publisher = publisher.Publisher(root, keep=keep)
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)

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
        }
        local = tempfile.mkdtemp(prefix="keras-checkpoint-")
        try:
            self._checkpoint.write(os.path.join(local, FILE_PREFIX))
        except BaseException:
            shutil.rmtree(local, ignore_errors=True)
            raise
        self.publisher.submit(local, step, metadata)

    def close(self) -> None:
        """Wait until the last checkpoint is published (before the export and the exit)."""
        self.publisher.close()

    def restore(self) -> Position:
        """Restore the newest complete checkpoint all tasks have; return where it was taken."""
        latest = checkpoints.latest_complete(self.root, validate=_validate)
        mine = latest.step if latest else 0
        agreed = self.consensus.minimum(mine)
        chosen = latest
        if agreed != mine:
            # The same validation as for the newest one: a marked but unreadable copy is skipped.
            chosen = checkpoints.latest_complete(self.root, validate=_validate, max_step=agreed)
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
        if chosen is None:
            logger.info("No complete checkpoint in %s: starting from epoch 1", self.root)
            return Position()
        try:
            self._checkpoint.read(
                os.path.join(chosen.path, FILE_PREFIX)
            ).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise cli.InputError(
                f"checkpoint {chosen.path} does not fit this model (were --model, --image-size "
                f"or the classes changed? use a new --checkpoint-dir): {error}"
            ) from None
        metadata = chosen.metadata()
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

    def _discard_after(self, step: int) -> None:
        for checkpoint in checkpoints.list_checkpoints(self.root):
            if checkpoint.step > step:
                logger.info("Removing %s: newer than the resume point", checkpoint.path)
                shutil.rmtree(checkpoint.path, ignore_errors=True)


class CheckpointCallback(keras.callbacks.Callback):
    """Saves at the end of every epoch, within epochs at least every ``minutes``, and at once
    on a preemption ``notice`` (``trainer.preemption``; then training stops).

    A mid-epoch checkpoint records how many steps of its epoch were done; after a restart only
    the remaining steps of that epoch run (on the batches the interrupted run would have
    trained next: ``passes.training_dataset``), then the next epochs.
    ``steps_offset`` is that count while the rest of an interrupted epoch runs. Under
    MultiWorkerMirroredStrategy the tasks agree every ``AGREE_EVERY_BATCHES`` batches on both
    "a timed save is due" and "some task got SIGTERM", in one collective.
    """

    def __init__(self, state: TrainingState, minutes: float, notice=None):
        super().__init__()
        self.state = state
        self.interval = checkpoints.Interval(minutes)
        self.notice = notice
        self._epoch = 0
        self._batches = 0
        self.steps_offset = 0

    def on_train_begin(self, logs=None):
        self.interval.reset()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        due = self.interval.seconds > 0 and self.interval.due()
        stop = self.notice is not None and self.notice.received
        consensus = self.state.consensus
        if consensus.distributed:
            if self._batches % AGREE_EVERY_BATCHES:
                return
            flags = consensus.gather(int(due) | 2 * int(stop))  # bit 0: due, bit 1: SIGTERM
            due, stop = any(f & 1 for f in flags), any(f & 2 for f in flags)
        stop = self.notice is not None and self.notice.agreed(stop)
        if due or stop:
            self.state.save(self._epoch, steps_into_epoch=self.steps_offset + batch + 1)
            self.interval.reset()
        if stop:
            # Out of fit at once, every task at this batch: nothing of Keras's epoch and train
            # ends (collectives, TensorBoard) stands between the published checkpoint and the
            # exit, which the VM's stop may cut short.
            self.state.close()
            raise self.notice.preempted(f"{checkpoints.PREFIX}{self.state.step}")

    def on_epoch_end(self, epoch, logs=None):
        if self.notice is not None and self.notice.stopping:
            return  # Keras ends the epoch it stops in: not a whole epoch, already saved
        self.steps_offset = 0
        self.state.save(epoch + 1)
        self.interval.reset()
