"""YOURS TO CHANGE: how a run resumes, the glue between the Hugging Face ``Trainer`` and the
runtime's checkpoint mirror (``vertex_trainer_runtime.torch.checkpoint_mirror``).

The mirror publishes each checkpoint the Trainer saves locally to the checkpoint dir in the
background (``COMPLETE`` marker last, every node's RNG states), saves every
``--checkpoint-minutes`` and on a preemption notice; at start the nodes agree on the newest
complete checkpoint that passes ``check`` and copy it back to local disk for the Trainer.
"""

from __future__ import annotations

import logging
import os

from transformers import TrainingArguments
from vertex_trainer_runtime import preemption
from vertex_trainer_runtime.torch import checkpoint_mirror

logger = logging.getLogger(__name__)

# What a checkpoint must pass to be resumed from: Trainer's state, weights that load, and the
# optimizer and scheduler states (without them resuming would silently reset the optimizer).
check = checkpoint_mirror.validate


def restore(checkpoint_dir: str, work_dir: str, training_args: TrainingArguments) -> str | None:
    """The local copy of the checkpoint every node agreed on, for ``resume_from_checkpoint``
    (None: start afresh). Every rank calls it; one per node reads the checkpoint dir."""
    path = checkpoint_mirror.restore_agreed(
        checkpoint_dir,
        os.path.join(work_dir, "resume"),
        looks=training_args.local_process_index == 0,
        device=training_args.device,
        check=check,
    )
    if path and training_args.process_index == 0:
        logger.info("Resuming from %s", os.path.basename(path))
    return path


def mirror(
    checkpoint_dir: str, minutes: float, keep: int, notice: preemption.Notice
) -> checkpoint_mirror.MirrorCheckpoints:
    """The Trainer callback that publishes checkpoints, saves every ``minutes`` (0: never by
    time) and at the step of an agreed preemption ``notice``; ``keep`` published ones stay."""
    return checkpoint_mirror.MirrorCheckpoints(checkpoint_dir, minutes, keep, notice)
