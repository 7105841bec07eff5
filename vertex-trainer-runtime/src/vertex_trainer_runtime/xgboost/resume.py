"""Checkpoints of the booster and resume at round granularity (``xgb_model=`` the restored booster).
The runtime's (``vertex_trainer_runtime.xgboost``): no user edits it.

A checkpoint is ``checkpoint-<rounds>/model.ubj`` (the booster, UBJSON), published with its
marker last. The round count always comes from the loaded booster, never a file name. Early
stopping's state rides in the booster's attributes (``rounds``), so the booster is all a resume
needs.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable

import xgboost as xgb
from xgboost.callback import TrainingCallback

from vertex_trainer_runtime import checkpoints, publisher, runtime

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "model.ubj"  # in checkpoint-<rounds>/: a project's checkpoints keep this name
DEFAULT_CHECKPOINT_ROUNDS = 50  # --checkpoint-rounds' default in the trainer's flags


def restore(
    root: str, group, num_boost_round: int, check: Callable[[xgb.Booster], None] | None = None
) -> xgb.Booster | None:
    """The chief's newest usable checkpoint, on every replica (None: start from scratch).

    ``check`` raises ``ValueError`` for a booster that does not fit this run's data (the
    trainer's: objective, features, classes); such a checkpoint is skipped.
    """
    raw = None
    if group.rank == 0:
        booster = latest_booster(root, validate=check)
        raw = bytes(booster.save_raw(raw_format="ubj")) if booster is not None else None
    raw = group.broadcast(raw)
    if raw is None:
        return None
    booster = xgb.Booster(model_file=bytearray(raw))
    if booster.num_boosted_rounds() > num_boost_round:
        logger.warning(
            f"The checkpoint has {booster.num_boosted_rounds()} rounds, more than "
            f"--num-boost-round={num_boost_round}: keeping the first {num_boost_round}"
        )
        booster = booster[:num_boost_round]
    return booster


def load_checkpoint(folder: str) -> xgb.Booster:
    """The booster in a checkpoint folder (raises when it cannot be loaded)."""
    booster = xgb.Booster()
    booster.load_model(os.path.join(folder, CHECKPOINT_FILE))
    if booster.num_boosted_rounds() < 1:
        raise ValueError("the booster has no trees")
    return booster


def latest_booster(root: str, validate=None) -> xgb.Booster | None:
    """The booster of the newest complete, loadable checkpoint under ``root``, if any."""

    loaded: dict[str, xgb.Booster] = {}

    def check(folder: str) -> None:
        booster = load_checkpoint(folder)
        if validate is not None:
            validate(booster)
        loaded[folder] = booster

    found = checkpoints.latest_complete(root, validate=check)
    if found is None:
        return None
    booster = loaded[found.path]
    rounds = booster.num_boosted_rounds()
    logger.info("Resuming from %s: %d rounds done", runtime.to_gcs_uri(found.path), rounds)
    return booster


def save_checkpoint(booster: xgb.Booster, publishing: publisher.Publisher) -> None:
    """Write the booster locally; ``publishing`` copies it to ``checkpoint-<rounds>`` in the
    background (complete marker last) and prunes."""
    rounds = booster.num_boosted_rounds()
    local = tempfile.mkdtemp(prefix="xgb-checkpoint-")
    with open(os.path.join(local, CHECKPOINT_FILE), "wb") as handle:
        handle.write(booster.save_raw(raw_format="ubj"))
    publishing.submit(local, rounds, {"rounds": rounds, "xgboost": xgb.__version__})


class Checkpointer(TrainingCallback):
    """Checkpoint every ``every`` rounds, every ``minutes`` minutes and at the end (rank 0)."""

    def __init__(self, root: str, every: int, minutes: float, enabled: bool, speed):
        super().__init__()
        self.root = root
        self.every = every
        self.interval = checkpoints.Interval(minutes)
        self.enabled = enabled
        self.saved_at = -1
        self.publisher = publisher.Publisher(root)
        self.speed = speed  # a throughput.Throughput: it adds up the time of the saves

    def save(self, booster: xgb.Booster) -> None:
        rounds = booster.num_boosted_rounds()
        if self.enabled and rounds != self.saved_at:
            with self.speed.timing("checkpoint"):
                save_checkpoint(booster, self.publisher)
            self.saved_at = rounds
            self.interval.reset()

    def after_iteration(self, model, epoch, evals_log) -> bool:
        rounds = model.num_boosted_rounds()
        if (self.every and rounds % self.every == 0) or self.interval.due():
            self.save(model)
        return False

    def after_training(self, model):
        self.save(model)
        if self.enabled:
            self.publisher.close()  # the final checkpoint is complete before the export
        return model


def rounds_between_checkpoints(
    rounds: int, minutes: float, device: str, default: int = DEFAULT_CHECKPOINT_ROUNDS
) -> int:
    """``--checkpoint-rounds``; on a GPU, left at its ``default`` with ``--checkpoint-minutes``
    on: 0, checkpoints by time only. A save serializes every tree (about 20 µs a tree), so a
    save every 50 rounds of a few ms costs a share of training that grows with the model."""
    if device == "cuda" and minutes > 0 and rounds == default:
        logger.info(
            f"On the GPU: a checkpoint every {minutes:g} minutes, not every {rounds} rounds "
            f"(--checkpoint-rounds other than {rounds}: by rounds too)"
        )
        return 0
    return rounds
