"""Data order: sampled rounds resume exactly.

XGBoost has no epochs: each boosting round uses every training row, split across replicas
(test_xgboost_distributed.py checks the split).
With ``--subsample`` or ``--colsample-*`` below 1 each round draws a random sample; a resumed
run must draw the same samples as the uninterrupted one, or a preempted tuning trial is scored
on another model than the one it would have trained.
"""

from __future__ import annotations

import functools

import pytest
from conftest import FAST, check_ok, load_model, run_in_process, run_two_replicas

from trainer import resume

ROUNDS = 30
CUT = 12  # rounds of the first, interrupted attempt
SAMPLING = ["--subsample=0.6", "--colsample-bytree=0.7"]


def test_round_seeds_depend_on_seed_and_round_only():
    seeds = {(s, r): resume.round_seed(s, r) for s in (41, 42) for r in range(50)}
    assert len(set(seeds.values())) == len(seeds)  # neighbouring seeds share no round seed
    assert resume.round_seed(42, 7) == seeds[(42, 7)]
    assert all(0 <= value < 2**31 for value in seeds.values())


def _common(tmp_path) -> list[str]:
    return [
        "--train-data=synthetic:600",
        "--eval-data=synthetic:200",
        "--eta=0.3",
        "--max-depth=4",
        "--checkpoint-rounds=4",
        *SAMPLING,
        *FAST,
    ]


def _trees(model_dir) -> list[str]:
    booster, _ = load_model(model_dir)
    return booster.get_dump(with_stats=True)


@pytest.mark.slow  # make test-all: the fast tier keeps one resume (test_xgboost_resume.py)
def test_sampled_run_resumes_to_the_same_trees(tmp_path, monkeypatch):
    """Interrupted after round 12 and rerun: the same trees, split values and covers (the runs
    are calls in this process: the rerun reads the first run's checkpoint from disk)."""
    common = _common(tmp_path)
    run = functools.partial(run_in_process, monkeypatch=monkeypatch)
    check_ok(run([*common, f"--num-boost-round={ROUNDS}", f"--job-dir={tmp_path / 'a'}"]))
    job = tmp_path / "b"
    check_ok(run([*common, f"--num-boost-round={CUT}", f"--job-dir={job}"]))
    result = run([*common, f"--num-boost-round={ROUNDS}", f"--job-dir={job}"])
    check_ok(result)
    assert f"{CUT} rounds done" in result.stderr
    resumed, reference = _trees(job / "model"), _trees(tmp_path / "a" / "model")
    assert len(resumed) == len(reference) == ROUNDS
    different = [k for k, (a, b) in enumerate(zip(resumed, reference, strict=True)) if a != b]
    assert different == []


@pytest.mark.distributed
def test_sampled_run_on_two_replicas_resumes_to_the_same_trees(tmp_path):
    common = _common(tmp_path)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir()
    parts.mkdir()
    run_two_replicas(whole, [*common, f"--num-boost-round={ROUNDS}"])
    run_two_replicas(parts, [*common, f"--num-boost-round={CUT}"])
    logs = run_two_replicas(parts, [*common, f"--num-boost-round={ROUNDS}"])
    assert f"{CUT} rounds done" in logs["chief"]
    resumed = _trees(parts / "chief" / "model")
    assert resumed == _trees(whole / "chief" / "model")
