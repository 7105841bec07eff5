"""PyTorch's side of a preemption notice (``trainer.preemption``): stop within two steps.

Every rank must save the same step, even when only one VM got SIGTERM. So under DDP the ranks
share their flags ("did my replica get SIGTERM?", "is a timed save due on rank 0?") at every
training step, in a tiny all-reduce (MAX) on a CPU (gloo) process group of its own: it starts
when a step begins and is read when the step ends, so it runs while the step computes and
never syncs a GPU. A notice is acted on at the end of the step that was running when it came,
or of the next one if it came after that step began: from the first step of every attempt, at
any step time. On one process the notice is read at every step's end. That step's checkpoint
is then saved (``MirrorCheckpoints.on_save`` publishes it, marker last), training stops, and
``stopped_early`` ends the run with ``Preempted``.

While training, the flags also go round once per evaluation batch: a notice during an
evaluation ends it within two batches (:class:`EvaluationStopped`; the weights are those of the
step just trained) and :func:`save_after_evaluation_stopped` saves that step. After the last
training step the final checkpoint is already complete, so a notice lets the final evaluation
and the export go on: the run ends 0 if they fit in the grace period, and a rerun after a
SIGKILL resumes at the last step and only evaluates and exports.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from trainer import preemption


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
    """Save the step whose evaluation a notice stopped, as the Trainer saves it (every rank).

    The evaluation changed no weight, optimizer or RNG state the checkpoint holds (its data
    loader drew its seed when it started, as a whole evaluation does), so resuming from this
    checkpoint goes on exactly as a run that was never stopped.
    """
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
