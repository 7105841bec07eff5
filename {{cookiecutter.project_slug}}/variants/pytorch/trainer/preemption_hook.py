"""PyTorch's side of a preemption notice (``trainer.preemption``): stop at a step boundary.

Under DDP the ranks agree now and then, in one small all-reduce (MAX): "is a timed save due on
rank 0?", "did my replica get SIGTERM?" and when to agree next (:class:`Cadence`: every
``SYNC_EVERY_STEPS`` steps, fewer when steps are slow, so that a notice is acted on within about
``AGREE_SECONDS``, well inside the ~30 s Compute Engine gives before it stops the VM). So every
rank saves the same step even when only one VM got the notice. One process decides at every
step. On a notice the step's checkpoint is saved (``MirrorCheckpoints.on_save`` publishes it,
marker last) and training stops; ``stopped_early`` then ends the run with ``Preempted``.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from trainer import preemption

# Under DDP the ranks agree at most every this many steps (a GPU sync each time) ...
SYNC_EVERY_STEPS = 20
# ... and about this often when steps are slow.
AGREE_SECONDS = 5.0


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def agree_max(values: list[int], device) -> list[int]:
    """The largest of each value over all ranks (the values themselves without DDP)."""
    if not distributed():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(value) for value in tensor.tolist()]


class Cadence:
    """At which global steps the ranks agree: each proposes a step count from its own step
    time, and the smallest proposal (agreed with the flags) sets the next one."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.next_step: int | None = None  # None: at the first step this process trains
        self._last: tuple[int, float] | None = None

    def due(self, step: int) -> bool:
        return not distributed() or self.next_step is None or step >= self.next_step

    def proposal(self, step: int) -> int:
        """Steps until the next agreement: SYNC_EVERY_STEPS, or fewer if that takes too long."""
        if self._last is None or step <= self._last[0]:
            return SYNC_EVERY_STEPS
        per_step = (self.clock() - self._last[1]) / (step - self._last[0])
        if per_step <= 0:
            return SYNC_EVERY_STEPS
        return max(1, min(SYNC_EVERY_STEPS, int(AGREE_SECONDS / per_step)))

    def agreed(self, step: int, steps: int) -> None:
        self.next_step = step + max(1, steps)
        self._last = (step, self.clock())


def on_notice(notice: preemption.Notice | None, stop: bool, control) -> bool:
    """On an agreed notice: save this step and stop, skipping evaluation; True if so."""
    if notice is None or not notice.agreed(bool(stop)):
        return False
    control.should_save = True
    control.should_training_stop = True
    control.should_evaluate = False
    return True


def skip_epoch_end(notice: preemption.Notice | None, control) -> None:
    """The Trainer still ends the epoch it stops in: no second save, no evaluation then."""
    if notice is not None and notice.stopping:
        control.should_save = False
        control.should_evaluate = False


def stopped_early(notice: preemption.Notice, state) -> None:
    """Raise ``Preempted`` once every rank is past the save, if the notice stopped training."""
    if not notice.stopping or state.global_step >= state.max_steps:
        return
    if distributed():
        dist.barrier()  # rank 0 has published the checkpoint
    raise notice.preempted(f"checkpoint-{state.global_step}")
