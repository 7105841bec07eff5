"""Preemption notices: SIGTERM means "save a checkpoint at the next step boundary, then exit".

Compute Engine preempts a Spot VM (or stops it for maintenance) by sending the container
SIGTERM and stopping the VM about 30 s later. A trainer that installs a :class:`Notice` keeps
training after SIGTERM, but at its next step, batch or round boundary every replica of the job
agrees (a framework collective, see each variant's ``train.py``) to save that step's checkpoint,
and then exits with :data:`EXIT_CODE`, so Vertex reruns it from that checkpoint.

The handler only records the signal: logging or I/O from inside a signal handler can fail on a
stream the interrupted code was writing. A second SIGTERM (torchrun's agent forwards the one it
gets to its workers) is recorded and ignored: the save goes on. If the VM is stopped before the
save ends, the checkpoint has no ``COMPLETE`` marker (the marker is written last, see
``vertex_trainer_runtime.checkpoints``) and a restart resumes from the one before.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from vertex_trainer_runtime import ledger

logger = logging.getLogger(__name__)

# 128 + SIGTERM: what a process that SIGTERM ended reports. Non-zero, so Vertex reruns the replica
# (it treats no exit code but 0 as success), and distinct from 1 (a crash) and 2 (bad input).
EXIT_CODE = 128 + signal.SIGTERM

# Whether any Notice of this process recorded SIGTERM: see noticed().
_noticed = False


class Preempted(Exception):
    """Training stopped early on a preemption notice, after its checkpoint was saved."""

    def __init__(self, checkpoint: str, seconds: float | None = None):
        self.checkpoint = checkpoint  # e.g. "checkpoint-120"
        self.seconds = seconds  # from this replica's SIGTERM to the saved checkpoint, if it got one
        super().__init__(checkpoint)

    def message(self) -> str:
        """The one line a replica logs before it exits for a restart."""
        since = (
            f"{self.seconds:.1f} s after SIGTERM"
            if self.seconds is not None
            else "SIGTERM reached another replica"
        )
        return (
            f"preemption notice: saved {self.checkpoint}, exiting for a restart "
            f"(exit {EXIT_CODE}; {since})"
        )


class Notice:
    """Whether this process got a preemption notice (SIGTERM), and when.

    ``install()`` replaces the SIGTERM handler (main thread only); ``uninstall()`` puts the
    previous one back. ``stopping`` is set by the framework hook once the replicas agreed to
    stop, so that end-of-epoch work (evaluation, an epoch checkpoint) is skipped.
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.received_at: float | None = None
        self.signals = 0
        self.stopping = False
        self.saved_at: float | None = None  # when the checkpoint of the notice was saved
        self._previous = None

    @property
    def received(self) -> bool:
        return self.received_at is not None

    def seconds_since(self) -> float | None:
        """Seconds since this process got SIGTERM (None: it did not get one)."""
        return None if self.received_at is None else self._clock() - self.received_at

    def seconds_since_saved(self) -> float | None:
        """Seconds since the checkpoint of the notice was saved (None: not saved yet)."""
        return None if self.saved_at is None else self._clock() - self.saved_at

    def handle(self, signum=None, frame=None) -> None:
        global _noticed
        self.signals += 1
        if self.received_at is None:
            self.received_at = self._clock()
        _noticed = True

    def install(self) -> Notice:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self.handle)
        else:
            logger.warning("Not in the main thread: SIGTERM will not save a checkpoint")
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def agreed(self, any_replica: bool) -> bool:
        """Record that the replicas agreed to stop (``any_replica``: one got SIGTERM)."""
        if any_replica and not self.stopping:
            self.stopping = True
            who = "this replica" if self.received else "another replica"
            received = time.time() - self.seconds_since() if self.received else None
            ledger.record("preemption_notice", at=received, here=self.received)
            logger.warning(
                "Preemption notice (SIGTERM to %s, %d signal(s) here): saving a checkpoint now",
                who,
                self.signals,
            )
        return self.stopping

    def preempted(self, checkpoint: str) -> Preempted:
        """The exception that ends training once ``checkpoint`` is saved."""
        self.saved_at = self._clock()
        return Preempted(checkpoint, self.seconds_since())


def noticed() -> bool:
    """Whether this process got a preemption notice: a run that still finished (the notice came
    after its last step) should then exit at once, before the VM stops (see ``task.finish``)."""
    return _noticed


def exit_now(code: int = EXIT_CODE):
    """End the process at once with ``code``, skipping Python's teardown (logs flushed)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
