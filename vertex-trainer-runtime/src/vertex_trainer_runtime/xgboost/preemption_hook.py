"""XGBoost's side of a preemption notice (``vertex_trainer_runtime.preemption``): stop at a
round boundary. The runtime's (``vertex_trainer_runtime.xgboost``): no user edits it.

After each round the replicas all-reduce (MAX) "did I get SIGTERM?", so all stop after the same
round; the chief saves it (marker last) and every replica ends with ``Preempted`` (exit 143,
Vertex reruns from there). One 4-byte all-reduce per round; none on one replica. SIGTERM to exit
takes at most one round, the checkpoint write and its publish; :class:`ExitBeforeTheVMStops`
ends whatever still runs ``GRACE_SECONDS - EXIT_MARGIN_SECONDS`` after SIGTERM (exit 143).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
from xgboost.callback import TrainingCallback

from vertex_trainer_runtime import ledger, preemption

logger = logging.getLogger(__name__)

# Compute Engine stops a preempted (Spot) VM about 30 s after its SIGTERM ...
GRACE_SECONDS = 30.0
# ... so a replica still running this long before that ends itself: its exit, not a SIGKILL.
EXIT_MARGIN_SECONDS = 5.0
# How often the watchdog looks for a notice: the signal handler only records it.
WATCH_SECONDS = 0.2


class StopOnNotice(TrainingCallback):
    """The last callback of a round: agree, save (``checkpointer``, the chief's) and stop."""

    def __init__(self, notice: preemption.Notice, checkpointer, distributed: bool):
        super().__init__()
        self.notice = notice
        self.checkpointer = checkpointer
        self.distributed = distributed
        self.ledger = ledger.current()  # the rounds reached: exact in the report after a kill

    def after_iteration(self, model, epoch, evals_log) -> bool:
        self.ledger.step = model.num_boosted_rounds()  # the booster's count: no device read
        if not self.distributed and not self.notice.received:
            return False  # the common round on one replica: nothing to agree on
        flag = int(self.notice.received)
        if self.distributed:
            from xgboost import collective

            agreed = collective.allreduce(np.array([flag], dtype=np.int32), collective.Op.MAX)
            flag = int(agreed[0])
        if not self.notice.agreed(bool(flag)):
            return False
        self.checkpointer.save(model)
        return True


def stopped_early(notice: preemption.Notice, booster, num_boost_round: int) -> None:
    """Raise ``Preempted`` when the notice stopped training before its last round."""
    rounds = booster.num_boosted_rounds()
    if notice.stopping and rounds < num_boost_round:
        raise notice.preempted(f"checkpoint-{rounds}")


class ExitBeforeTheVMStops:
    """While in its ``with`` block: once SIGTERM came, end the process (exit 143) if it still
    runs ``grace - margin`` seconds later.

    Nothing is lost by it: checkpoints are complete or ignored (marker last), and the final
    checkpoint is complete before the evaluation and export that follow the last round, so a
    rerun of a job that ended here only exports. ``exit`` is injectable for tests.
    """

    def __init__(
        self,
        notice: preemption.Notice,
        grace: float = GRACE_SECONDS,
        margin: float = EXIT_MARGIN_SECONDS,
        exit=preemption.exit_now,
    ):
        self.notice = notice
        self.limit = max(0.0, grace - margin)
        self.exit = exit
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="exit-before-vm-stops", daemon=True
        )

    def __enter__(self) -> ExitBeforeTheVMStops:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self.notice.received:
            if self._done.wait(WATCH_SECONDS):
                return
        if self._done.wait(max(0.0, self.limit - self.notice.seconds_since())):
            return
        logger.warning(
            f"Still running {self.notice.seconds_since():.1f} s after SIGTERM, shortly before the "
            f"VM stops: exiting now (exit {preemption.EXIT_CODE}); a rerun resumes from the "
            "newest complete checkpoint"
        )
        self.exit(preemption.EXIT_CODE)
