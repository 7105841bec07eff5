"""The runtime's round arithmetic of an XGBoost run: each round's sampling seed, the checkpoint
cadence on a GPU, and early stopping's state read back from a booster."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("xgboost")

import xgboost as xgb  # noqa: E402

from vertex_trainer_runtime.xgboost import resume, rounds  # noqa: E402


def test_round_seeds_depend_on_seed_and_round_only():
    seeds = {(s, r): rounds.round_seed(s, r) for s in (41, 42) for r in range(50)}
    assert len(set(seeds.values())) == len(seeds)  # neighbouring seeds share no round seed
    assert rounds.round_seed(42, 7) == seeds[(42, 7)]
    assert all(0 <= value < 2**31 for value in seeds.values())


def test_gpu_checkpoint_cadence_keeps_a_chosen_one():
    default = resume.rounds_between_checkpoints
    assert default(50, 10, "cuda") == 0  # the default: by time only
    assert default(50, 10, "cpu") == 50
    assert default(20, 10, "cuda") == 20  # chosen: kept
    assert default(50, 0, "cuda") == 50  # no time-based checkpoints: rounds still bound the loss
    assert default(30, 10, "cuda", default=30) == 0  # the trainer's own default


def test_samples_only_below_one():
    assert not rounds.samples({"subsample": 1.0, "eta": 0.1})
    assert rounds.samples({"colsample_bynode": "0.5"})


def test_early_stopping_state_rides_in_the_booster():
    rng = np.random.default_rng(0)
    matrix = xgb.DMatrix(rng.normal(size=(40, 3)), label=rng.integers(0, 2, 40))
    booster = xgb.train({"objective": "binary:logistic"}, matrix, num_boost_round=2)
    assert rounds.restored_early_stopping(booster) is None
    booster.set_attr(best_iteration="1", best_score="0.25")
    assert rounds.restored_early_stopping(booster) == (1, 0.25)
