"""When training saves a checkpoint, and the exit a preemption notice forces.

Split out of ``resume.py``, which holds what a checkpoint is (``TrainingState``: save, publish,
restore): ``CheckpointCallback`` decides the moments (epoch ends, ``--checkpoint-minutes``, a
SIGTERM), agreed by every task under MultiWorkerMirroredStrategy; ``exit_if_notice_outlives`` is
the watchdog that ends a replica still running well after its SIGTERM.
"""

from __future__ import annotations

import logging
import threading
import time

import tf_keras as keras
from vertex_trainer_runtime import checkpoints, preemption

from trainer import resume

logger = logging.getLogger(__name__)

# Under MultiWorkerMirroredStrategy the tasks agree on "a time-based save is due" with a tiny
# collective every AGREE_EVERY_BATCHES batches (the same steps in every attempt), and on "a task
# got SIGTERM" about every NOTICE_SECONDS (every batch once a batch takes that long): a round
# trip per fast step would cost more than it saves, a slow step is acted on at its end.
AGREE_EVERY_BATCHES = 10
NOTICE_SECONDS = 1.0
# After SIGTERM a replica exits by then whatever it is doing (a collective waiting on a replica
# that is gone, an evaluation or export too long for the grace): Compute Engine stops the VM
# about 30 s after the notice, and the newest complete checkpoint is what the rerun needs.
EXIT_AFTER_NOTICE_SECONDS = 25.0
GRACE_SECONDS = 30.0


class CheckpointCallback(keras.callbacks.Callback):
    """Saves at the end of every epoch, within epochs at least every ``minutes``, and at once
    on a preemption ``notice`` (``vertex_trainer_runtime.preemption``; then training stops).

    A mid-epoch checkpoint records how many steps of its epoch were done; after a restart only
    the remaining steps of that epoch run (on the batches the interrupted run would have
    trained next: ``passes.training_dataset``), then the next epochs.
    ``steps_offset`` is that count while the rest of an interrupted epoch runs.

    Under MultiWorkerMirroredStrategy every task must join the same collectives, so the tasks
    agree in one tiny all-gather: at every ``AGREE_EVERY_BATCHES``-th batch on "a timed save is
    due" (the same steps whatever the step time, so resumed runs save where whole runs do), and
    on "some task got SIGTERM" at the first batch of every attempt, then every ``every`` batches:
    each agreement also gathers every task's time per batch, and all tasks derive the same
    ``every`` from the slowest, so that agreements come about ``NOTICE_SECONDS`` apart (every
    batch once a batch takes that long). A notice is thus acted on within
    max(NOTICE_SECONDS, one step) of training, then the save.
    """

    def __init__(self, state: resume.TrainingState, minutes: float, notice=None):
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
        preemption.drill_step_pause()  # drills only: a step of real length
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
    notice, state: resume.TrainingState, seconds: float = EXIT_AFTER_NOTICE_SECONDS
):
    """A watchdog: ``seconds`` after SIGTERM the process exits (EXIT_CODE) whatever it is doing.

    What can hold a replica past its notice: a collective whose peer is gone (MultiWorkerMirrored
    collectives have no timeout: the chief's evaluation legitimately keeps the others waiting),
    or an evaluation and export longer than the grace. By then the checkpoint of the notice is
    published, or being published (the watchdog gives it until Compute Engine's stop); a rerun
    resumes from the newest complete one.
    """

    def watch():
        while not notice.received:
            time.sleep(0.2)
        while notice.seconds_since() < seconds:
            time.sleep(0.2)
        logger.warning(
            "Still running %.0f s after SIGTERM (a collective waiting on a replica that is gone, "
            "or evaluation and export longer than the grace): exiting for a restart",
            notice.seconds_since(),
        )
        state.publisher.finish_within(GRACE_SECONDS - 1 - notice.seconds_since())
        preemption.exit_now()

    threading.Thread(target=watch, name="notice-watchdog", daemon=True).start()
