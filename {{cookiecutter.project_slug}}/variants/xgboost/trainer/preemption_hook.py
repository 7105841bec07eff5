"""XGBoost's side of a preemption notice (``trainer.preemption``): stop at a round boundary.

After every boosting round the replicas all-reduce (MAX) "did I get SIGTERM?" through XGBoost's
own collective, so all of them stop after the same round even when one VM got the notice. The
chief then saves that round's checkpoint (marker last) and every replica ends with
``Preempted``: ``trainer.task`` exits non-zero and Vertex reruns the job from that checkpoint.
One 4-byte all-reduce per round, next to the histograms of the round; none on one replica.
"""

from __future__ import annotations

import numpy as np
from xgboost.callback import TrainingCallback

from trainer import preemption


class StopOnNotice(TrainingCallback):
    """The last callback of a round: agree, save (``checkpointer``, the chief's) and stop."""

    def __init__(self, notice: preemption.Notice, checkpointer, distributed: bool):
        super().__init__()
        self.notice = notice
        self.checkpointer = checkpointer
        self.distributed = distributed

    def after_iteration(self, model, epoch, evals_log) -> bool:
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
