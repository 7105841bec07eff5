"""When training saves a checkpoint (epoch ends, ``--checkpoint-minutes``, a SIGTERM), agreed by
every task, and the watchdog that ends a replica still running well after its SIGTERM.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). What a checkpoint is, is
``training_state.TrainingState``'s (``run`` hands it here).
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from typing import Protocol

import tf_keras as keras

from vertex_trainer_runtime import checkpoints, preemption

logger = logging.getLogger(__name__)

# Under MultiWorkerMirroredStrategy the tasks agree on "a timed save is due" every
# AGREE_EVERY_BATCHES batches and on "a task got SIGTERM" about every NOTICE_SECONDS.
AGREE_EVERY_BATCHES = 10
NOTICE_SECONDS = 1.0
# After SIGTERM a replica exits by then whatever it is doing: Compute Engine stops the VM
# about 30 s after the notice.
EXIT_AFTER_NOTICE_SECONDS = 25.0
# Once the checkpoint of a notice is published a replica has nothing left to do but exit.
EXIT_AFTER_SAVE_SECONDS = 5.0
GRACE_SECONDS = 30.0


class TrainingState(Protocol):
    """What the callback and the watchdog need of the trainer's checkpoints."""

    consensus: object  # distributed.Consensus: gather(value) from every task
    publisher: object  # vertex_trainer_runtime.publisher.Publisher: finish_within(seconds)

    @property
    def step(self) -> int: ...  # the global step of the model

    def save(self, epochs_done: int, steps_into_epoch: int = 0) -> None: ...

    def close(self) -> None: ...  # wait until the last checkpoint is published


class CheckpointCallback(keras.callbacks.Callback):
    """Saves at every epoch's end, within epochs at least every ``minutes``, and at once on a
    preemption ``notice`` (then training stops). A mid-epoch checkpoint records its steps into
    the epoch (``steps_offset`` while a restart trains the rest of that epoch).

    Under MultiWorkerMirroredStrategy the tasks agree in one tiny all-gather: on "a timed save is
    due" at every ``AGREE_EVERY_BATCHES``-th batch (the same steps whatever the step time), and on
    "some task got SIGTERM" every ``every`` batches, derived from the slowest task's batch time
    so that agreements come about ``NOTICE_SECONDS`` apart.
    """

    def __init__(self, state: TrainingState, minutes: float, notice=None):
        super().__init__()
        self.state = state
        self.interval = checkpoints.Interval(minutes)
        self.notice = notice
        self._epoch = 0
        self._batches = 0
        self.steps_offset = 0
        self.every = 1  # batches between notice agreements (distributed)
        self._agreed_batches = 0
        self._agreed_at = time.monotonic()

    def on_train_begin(self, logs=None):
        self.interval.reset()
        self._agreed_at = time.monotonic()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        due = self.interval.seconds > 0 and self.interval.due()
        stop = self.notice is not None and self.notice.received
        if self.state.consensus.distributed:
            timed = self._batches % AGREE_EVERY_BATCHES == 0
            if not timed and self._batches % self.every:
                return
            due, stop = self._agree(due and timed, stop)
        stop = self.notice is not None and self.notice.agreed(stop)
        if due or stop:
            self.state.save(self._epoch, steps_into_epoch=self.steps_offset + batch + 1)
            self.interval.reset()
        if stop:
            # Out of fit at once, every task at this batch: nothing of Keras's epoch and train
            # ends (collectives, TensorBoard) stands between the published checkpoint and the
            # exit, which the VM's stop may cut short.
            self.stop_now()

    def _agree(self, due: bool, stop: bool) -> tuple[bool, bool]:
        """One all-gather: any task's due and SIGTERM bits, and the next ``every``."""
        now = time.monotonic()
        batches = max(1, self._batches - self._agreed_batches)
        per_batch_ms = int(1000 * (now - self._agreed_at) / batches)
        flags = self.state.consensus.gather(per_batch_ms * 4 + int(due) + 2 * int(stop))
        slowest_ms = max(1, max(flag >> 2 for flag in flags))
        self.every = max(1, min(AGREE_EVERY_BATCHES, int(1000 * NOTICE_SECONDS) // slowest_ms))
        self._agreed_batches, self._agreed_at = self._batches, time.monotonic()
        return any(flag & 1 for flag in flags), any(flag & 2 for flag in flags)

    def on_epoch_end(self, epoch, logs=None):
        if self.notice is not None and self.notice.stopping:
            return  # Keras ends the epoch it stops in: not a whole epoch, already saved
        self.steps_offset = 0
        self.state.save(epoch + 1)
        self.interval.reset()

    def stop_now(self):
        """Publish the last checkpoint saved, then end training for a restart."""
        if self.notice is not None:
            self.notice.stopping = True
        self.state.close()
        raise self.notice.preempted(f"{checkpoints.PREFIX}{self.state.step}")


def exit_if_notice_outlives(
    notice,
    state: TrainingState,
    seconds: float = EXIT_AFTER_NOTICE_SECONDS,
    after_save: float = EXIT_AFTER_SAVE_SECONDS,
):
    """A watchdog: ``seconds`` after SIGTERM, or ``after_save`` seconds after the checkpoint of a
    notice (this replica's or another's) was published, the process exits (EXIT_CODE) whatever
    it is doing (a collective whose peer is gone, an evaluation and export longer than the
    grace); the checkpoint of the notice is published by then, or given until Compute Engine's
    stop. Every thread's stack goes to the log first: where the replica was held.
    """

    def held() -> str | None:
        saved = notice.seconds_since_saved()
        if saved is not None and saved >= after_save:
            return f"{after_save:g} s after the checkpoint of the notice was published"
        since = notice.seconds_since()
        if since is not None and since >= seconds:
            return f"{since:.0f} s after SIGTERM"
        return None

    def watch():
        while (why := held()) is None:
            time.sleep(0.2)
        logger.warning(
            "Still running %s (a collective waiting on a replica that is gone, or evaluation "
            "and export longer than the grace): exiting for a restart",
            why,
        )
        faulthandler.dump_traceback(all_threads=True)
        left = GRACE_SECONDS - 1 - (notice.seconds_since() or 0.0)
        state.publisher.finish_within(left)
        preemption.exit_now()

    threading.Thread(target=watch, name="notice-watchdog", daemon=True).start()
