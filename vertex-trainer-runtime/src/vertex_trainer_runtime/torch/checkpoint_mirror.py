"""Hugging Face checkpoints that survive restarts.

``Trainer`` writes checkpoints in place on local disk and resuming crashes on a truncated one, so
:class:`MirrorCheckpoints` publishes each finished checkpoint to the checkpoint dir in the
background (``vertex_trainer_runtime.publisher``, ``COMPLETE`` marker last), with every node's
RNG states, and at start the nodes agree on the newest one that passes :func:`validate` and
copy it back.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from vertex_trainer_runtime import checkpoints, publisher
from vertex_trainer_runtime.torch import preemption_hook

logger = logging.getLogger(__name__)

KEEP_CHECKPOINTS = 2  # never fewer than 2: a corrupt newest one still leaves one to resume from
TRAINER_STATE = "trainer_state.json"
REQUIRED = ("optimizer.pt", "scheduler.pt")
RNG_STATES = "rng_state_*.pth"  # one per rank (rng_state.pth when a single process trains)


def validate(path: str) -> None:
    """Raise unless ``path`` holds a checkpoint ``Trainer`` can resume from in full."""
    with open(os.path.join(path, TRAINER_STATE), encoding="utf-8") as handle:
        state = json.load(handle)
    if not isinstance(state.get("global_step"), int):
        raise ValueError(f"{TRAINER_STATE} has no global_step")
    safetensors_files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    bin_files = sorted(glob.glob(os.path.join(path, "pytorch_model*.bin")))
    if not safetensors_files and not bin_files:
        raise ValueError("no model weights")
    if safetensors_files:
        from safetensors.torch import load_file

        for name in safetensors_files:
            load_file(name, device="cpu")
    for name in bin_files:
        torch.load(name, map_location="cpu", weights_only=True)
    for name in REQUIRED:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise ValueError(f"{name} is missing (resuming would reset the optimizer)")
        torch.load(file, map_location="cpu", weights_only=True)


# What a rank that does not look offers: larger than any step, so it never decides the minimum.
_ABSTAIN = 2**62


def agreed_checkpoint(
    checkpoint_dir: str, looks: bool = True, device=None, check=validate
) -> tuple[int, checkpoints.Checkpoint | None]:
    """The step every node resumes from (-1: none), and this node's copy of it if it ``looks``.

    Nodes may see different newest checkpoints (a stale /gcs/ listing, a failed ``check``): one
    rank per node offers its newest usable step, and while offers differ every node offers again
    at or below the smallest. Every rank must call this."""
    bound = None
    while True:
        found = None
        if looks:
            found = checkpoints.latest_complete(checkpoint_dir, validate=check, max_step=bound)
        if not preemption_hook.distributed():
            return (found.step if found else -1), found
        step = found.step if found else -1
        offer = [step, -step] if looks else [_ABSTAIN, _ABSTAIN]
        offers = torch.tensor(offer, dtype=torch.int64, device=device)
        dist.all_reduce(offers, op=dist.ReduceOp.MIN)
        lowest, highest = int(offers[0]), -int(offers[1])
        if lowest == highest:
            return lowest, found
        if lowest < 0:  # a node has no usable checkpoint at all: every node starts afresh
            logger.warning("Not resuming: some node has no usable checkpoint")
            return -1, None
        logger.warning(
            "Nodes offer checkpoints between steps %d and %d: looking at or below %d",
            lowest,
            highest,
            lowest,
        )
        bound = lowest


def restore_agreed(
    checkpoint_dir: str, local_root: str, looks: bool, device=None, check=validate
) -> str | None:
    """Copy the agreed checkpoint to ``local_root/checkpoint-N`` once per node; its path.

    ``looks``: this rank reads the checkpoint dir and writes ``local_root`` for its node (the
    node's local rank 0); the node's other ranks wait for it and use the same folder.
    """
    step, found = agreed_checkpoint(checkpoint_dir, looks, device, check)
    destination = os.path.join(local_root, f"{checkpoints.PREFIX}{step}")
    if looks:
        shutil.rmtree(local_root, ignore_errors=True)
        if found is not None:
            checkpoints.restore(found, destination)
            logger.info(
                "Restored checkpoint %s (global step %d) to %s", found.path, step, destination
            )
    if preemption_hook.distributed():
        dist.barrier()
    return destination if step >= 0 else None


class MirrorCheckpoints(TrainerCallback):
    """Publishes each checkpoint the Trainer saves locally; also saves every ``minutes``, and
    within two steps of a preemption ``notice`` (then training stops: ``preemption_hook``).

    The final step's checkpoint is saved before the final evaluation, not after it: a notice
    during that evaluation or the export then costs no training step.
    """

    def __init__(self, checkpoint_dir: str, minutes: float, keep: int = 2, notice=None):
        self.checkpoint_dir = checkpoint_dir
        self.interval = checkpoints.Interval(minutes)
        self.notice = notice
        self.flags = preemption_hook.Flags()
        self.training = False  # between the first and the last training step
        self.noticed_in: int | None = None  # the step that was running when SIGTERM came
        self.publisher = publisher.Publisher(checkpoint_dir, keep=keep)

    def _flags_here(self, state) -> tuple[bool, bool]:
        # Rank 0's clock decides a timed save; any rank's SIGTERM stops them all.
        due = state.is_world_process_zero and self.interval.due()
        return due, self.notice is not None and self.notice.received

    def on_train_begin(self, args, state, control, **kwargs):
        if self.notice is not None:
            self.notice.install()
        self.flags.open()
        self.training = True
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        if preemption_hook.distributed():
            self.flags.share(*self._flags_here(state))
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.notice is not None and self.notice.received and self.noticed_in is None:
            # The first step to end after SIGTERM was running when it came (or began after).
            self.noticed_in = state.global_step
            logger.info(
                "SIGTERM came during step %d, %.1f s ago",
                state.global_step,
                self.notice.seconds_since(),
            )
        # Under DDP what every rank had when this step began; else what this process has now.
        due, stop = self.flags.agreed() or self._flags_here(state)
        if not preemption_hook.on_notice(self.notice, stop, control) and due:
            control.should_save = True
        self._save_before_final_evaluation(state, control)
        return control

    def on_prediction_step(self, args, state, control, **kwargs):
        # Only evaluations between training steps stop: the final one is the run's result.
        if not self.training or state.global_step >= state.max_steps:
            return control
        if self.notice is not None and self.notice.received and self.noticed_in is None:
            self.noticed_in = state.global_step
            logger.info(
                "SIGTERM came during the evaluation at step %d, %.1f s ago",
                state.global_step,
                self.notice.seconds_since(),
            )
        if preemption_hook.distributed():
            _, stop = self.flags.agreed() or (False, False)
            if not stop:
                self.flags.share(*self._flags_here(state))
        else:
            stop = self._flags_here(state)[1]
        if stop and self.notice is not None and self.notice.agreed(True):
            raise preemption_hook.EvaluationStopped(state.global_step)
        return control

    def on_evaluate(self, args, state, control, **kwargs):
        # The flags of the last evaluation batch: a notice there saves this step now.
        if self.training and self.flags.pending:
            _, stop = self.flags.agreed()
            preemption_hook.on_notice(self.notice, stop, control)
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        preemption_hook.skip_epoch_end(self.notice, control)
        self._save_before_final_evaluation(state, control)
        return control

    def _save_before_final_evaluation(self, state, control) -> None:
        # The Trainer evaluates before it saves; after training ``report_final_model`` evaluates.
        if state.global_step >= state.max_steps and control.should_evaluate:
            control.should_evaluate = False
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        source = os.path.join(args.output_dir, f"{checkpoints.PREFIX}{step}")
        if preemption_hook.distributed():
            self._gather_rng_states(source, state)
        self.interval.reset()
        if state.is_world_process_zero:
            # A snapshot of hard links: the Trainer may delete its folder while it is copied.
            snapshot = _linked_copy(
                source, tempfile.mkdtemp(prefix="hf-checkpoint-", dir=args.output_dir)
            )
            self.publisher.submit(snapshot, step, {"epoch": state.epoch})
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False
        if self.flags.pending:  # a step the Trainer began but did not end (collective)
            self.flags.agreed()
        # The last checkpoint is complete before the export and before a preemption's exit.
        if state.is_world_process_zero:
            self.publisher.close()
        return control

    def _gather_rng_states(self, source: str, state) -> None:
        """Before rank 0 publishes and writes the marker, each other node copies its ranks'
        ``rng_state_<rank>.pth`` into the checkpoint dir: one writer per file."""
        destination = checkpoints.path_for(self.checkpoint_dir, state.global_step)
        dist.barrier()  # every rank has written its RNG state
        if state.is_world_process_zero:
            # A marker from an earlier attempt at this step must not vouch for a mix of files.
            stale_marker = os.path.join(destination, checkpoints.MARKER)
            if os.path.exists(stale_marker):
                os.remove(stale_marker)
        dist.barrier()
        if state.is_local_process_zero and not state.is_world_process_zero:
            os.makedirs(destination, exist_ok=True)
            names = [os.path.basename(p) for p in glob.glob(os.path.join(source, RNG_STATES))]
            checkpoints.copy_files(source, destination, names)
            shutil.rmtree(source, ignore_errors=True)  # nothing else of this node's is in it
        dist.barrier()


def _linked_copy(source: str, destination: str) -> str:
    """``source``'s files in ``destination`` as hard links (copies across file systems)."""
    for folder, _, names in os.walk(source):
        target = os.path.join(destination, os.path.relpath(folder, source))
        os.makedirs(target, exist_ok=True)
        for name in names:
            try:
                os.link(os.path.join(folder, name), os.path.join(target, name))
            except OSError:
                shutil.copy2(os.path.join(folder, name), os.path.join(target, name))
    return destination
