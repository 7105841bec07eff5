"""Checkpoints of the booster and resume at round granularity (``xgb_model=`` the restored booster).

YOURS TO CHANGE: what a checkpoint holds, when it must hold more than the booster; you should
not need to change this otherwise.

The round count always comes from the loaded booster, never a file name. Early stopping's state
rides in the booster's attributes, and :class:`SeedEachRound` makes row and column samples a
function of ``--seed`` and the round, so a resumed run ends as an uninterrupted one does.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import numpy as np
import xgboost as xgb
from vertex_trainer_runtime import checkpoints, publisher, runtime
from xgboost.callback import EarlyStopping, TrainingCallback

from trainer.flags import Training

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "model.ubj"


def restore(root: str, group, objective, schema, num_boost_round: int) -> xgb.Booster | None:
    """The chief's newest usable checkpoint, on every replica (None: start from scratch)."""

    def compatible(booster: xgb.Booster) -> None:
        learner = json.loads(booster.save_config())["learner"]
        saved = learner["objective"]["name"]
        if saved != objective.name:
            raise ValueError(f"it was trained for {saved}, this run is {objective.name}")
        if booster.num_features() != len(schema.feature_names):
            raise ValueError(
                f"it has {booster.num_features()} features, the data {len(schema.feature_names)}"
            )
        num_class = int(learner["learner_model_param"].get("num_class", 0))
        if num_class != schema.num_class and objective.kind == "multiclass":
            raise ValueError(f"it has {num_class} classes, the data {schema.num_class}")

    raw = None
    if group.rank == 0:
        booster = latest_booster(root, validate=compatible)
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


def rounds_between_checkpoints(rounds: int, minutes: float, device: str) -> int:
    """``--checkpoint-rounds``; on a GPU, left at its default (50) with ``--checkpoint-minutes``
    on: 0, checkpoints by time only. A save serializes every tree (about 20 µs a tree), so a
    save every 50 rounds of a few ms costs a share of training that grows with the model."""
    if device == "cuda" and minutes > 0 and rounds == Training().checkpoint_rounds:
        logger.info(
            f"On the GPU: a checkpoint every {minutes:g} minutes, not every {rounds} rounds "
            f"(--checkpoint-rounds other than {rounds}: by rounds too)"
        )
        return 0
    return rounds


def round_seed(seed: int, round_index: int) -> int:
    """The sampling seed of round ``round_index`` (0-based): mixed by ``SeedSequence`` so that
    runs whose seeds differ by a few share none; below 2**31, which every XGBoost build takes."""
    state = np.random.SeedSequence([seed, round_index]).generate_state(1)[0]
    return int(state) % 2**31


class SeedEachRound(TrainingCallback):
    """Seeds each round's row and column sampling from ``seed`` and the round number.

    XGBoost's sampling generator is process-wide and its column sampler is seeded once, neither
    saved in the booster, so a resumed booster would sample other rows and columns. Setting
    ``seed`` (XGBoost reseeds on a change) and reloading the booster's own configuration (a
    fresh updater and column sampler) makes each round sample what the uninterrupted run's
    round did, on every replica. Measured cost: about 0.6 ms per round.
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def before_iteration(self, model, epoch, evals_log) -> bool:
        model.set_param("seed", round_seed(self.seed, model.num_boosted_rounds()))
        model.load_config(model.save_config())
        return False


def samples(params: dict) -> bool:
    """Whether training draws random row or column samples (which :class:`SeedEachRound` fixes)."""
    names = ("subsample", "colsample_bytree", "colsample_bylevel", "colsample_bynode")
    return any(float(params.get(name, 1.0)) < 1 for name in names)


class ResumableEarlyStopping(EarlyStopping):
    """XGBoost's early stopping, restarted from the state the booster carries.

    ``EarlyStopping`` records ``best_iteration`` and ``best_score`` as booster attributes;
    after a resume, the rounds since the best one continue to count instead of restarting.
    """

    def __init__(self, rounds: int, metric_name: str, data_name: str):
        # save_best stays off: checkpoints need every round; the export truncates instead.
        super().__init__(rounds=rounds, metric_name=metric_name, data_name=data_name)

    def before_training(self, model):
        model = super().before_training(model)
        restored = restored_early_stopping(model)
        if restored is not None:
            best_iteration, best_score = restored
            name, metric = self.data, self.metric_name
            self.stopping_history = {name: {metric: [best_score]}}
            self.best_scores = {name: {metric: [best_score]}}
            self.current_rounds = model.num_boosted_rounds() - 1 - best_iteration
            logger.info(
                f"Early stopping resumed: best {metric}={best_score:.6g} at round "
                f"{best_iteration + 1}, {self.current_rounds} rounds since"
            )
        return model


def restored_early_stopping(booster: xgb.Booster) -> tuple[int, float] | None:
    """(best_iteration, best_score) saved in a booster by early stopping, if any."""
    iteration, score = booster.attr("best_iteration"), booster.attr("best_score")
    if iteration is None or score is None:
        return None
    return int(iteration), float(score)
