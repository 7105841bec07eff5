"""PyTorch's side of a preemption notice (``vertex_trainer_runtime.preemption``): every
rank saves the same step, within two steps of SIGTERM.

Under DDP the ranks share their flags ("did my replica get SIGTERM?", "is a timed save due?")
each step in a tiny background all-reduce (MAX) on a gloo group of their own, started when a
step begins and read when it ends, so no GPU waits. A notice during an evaluation while training
ends it within two batches and saves that step; after the last step the final evaluation and
the export go on (the final checkpoint is already complete).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from vertex_trainer_runtime import preemption


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


class EvaluationStopped(Exception):
    """The ranks agreed on a notice during an evaluation while training: save, then exit."""


class Flags:
    """Flags every rank shares: ``share`` starts a background all-reduce (MAX), ``agreed``
    waits for it. Every rank makes the same calls in the same order (they are collective)."""

    def __init__(self):
        self.group = None  # the CPU process group the flags travel in
        self._pending: tuple[object, torch.Tensor] | None = None

    def open(self) -> None:
        """A gloo group of every rank, so the flags never touch a GPU (collective)."""
        if distributed() and self.group is None:
            self.group = dist.new_group(backend="gloo")

    def share(self, *flags: bool) -> None:
        """Start sharing ``flags`` (a collective that runs in the background)."""
        if self._pending is not None:  # never two in flight: the ranks match them by order
            self.agreed()
        tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int64)
        work = None
        if distributed():
            work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        self._pending = (work, tensor)

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def agreed(self) -> list[bool] | None:
        """Each flag: set on any rank (None: nothing was shared since the last call)."""
        if self._pending is None:
            return None
        work, tensor = self._pending
        self._pending = None
        if work is not None:
            work.wait()  # started a step (or a batch) ago: done, unless a peer is gone
        return [bool(value) for value in tensor.tolist()]


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


def fit(trainer, notice: preemption.Notice, resume_from: str | None) -> None:
    """``trainer.train``; raises ``Preempted`` once the checkpoint of an agreed notice is saved."""
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except EvaluationStopped:
        save_after_evaluation_stopped(trainer)
    stopped_early(notice, trainer.state)


def save_after_evaluation_stopped(trainer) -> None:
    """Save the step whose evaluation a notice stopped, as the Trainer saves it (every rank); the
    evaluation changed nothing the checkpoint holds, so resuming goes on as if never stopped."""
    trainer._save_checkpoint(trainer.model_wrapped, trial=None)
    trainer.control = trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)
    trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)


def stopped_early(notice: preemption.Notice, state) -> None:
    """Raise ``Preempted`` once every rank is past the save, if the notice stopped training."""
    if not notice.stopping or state.global_step >= state.max_steps:
        return
    if distributed():
        dist.barrier()  # rank 0 has published the checkpoint
    raise notice.preempted(f"checkpoint-{state.global_step}")
