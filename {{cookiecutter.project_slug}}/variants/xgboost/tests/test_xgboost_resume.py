"""Resume: a killed run continues from its newest complete checkpoint, for the remaining rounds,
and ends as an uninterrupted run does: the same trees, early stop and samples.

With ``--subsample`` or ``--colsample-*`` below 1 each round draws a random sample; a resumed
run must draw the same samples as the uninterrupted one, or a preempted tuning trial is scored
on another model than the one it would have trained.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import time

import numpy as np
import pytest
from conftest import (
    FAST,
    SAMPLED,
    TIMEOUT_S,
    check_ok,
    load_model,
    run_trainer,
    synthetic_rows,
    trainer_env,
)
from vertex_trainer_runtime import checkpoints, preemption
from vertex_trainer_runtime.xgboost import resume
from vertex_trainer_tools.testing import DRILL_STEP_SECONDS_ENV, kill, read_metrics
from vertex_trainer_tools.trainer_runs import run_in_process, start_trainer
from vertex_trainer_tools.trainer_runs import without_vertex_variables as without_vertex


def _complete(root) -> list[int]:
    return [
        c.step for c in checkpoints.list_checkpoints(str(root)) if checkpoints.problem(c) is None
    ]


def test_killed_run_resumes_with_the_remaining_rounds(tmp_path):
    rounds, job, metric_file = 60, tmp_path / "job", tmp_path / "metrics"
    env = trainer_env(CLOUD_ML_HP_METRIC_FILE=str(metric_file))
    args = ["--train-data=synthetic:3000", "--eval-data=synthetic:300", f"--job-dir={job}"]
    args += [f"--num-boost-round={rounds}", "--checkpoint-rounds=10", "--eta=0.05", *FAST]
    # The first run at 0.1 s rounds (the drills' hooks, which start_trainer loads): killed
    # seconds before it could end.
    slowed = {**env, DRILL_STEP_SECONDS_ENV: "0.1"}
    process = start_trainer(args, slowed, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not _complete(job / "checkpoints"):
            assert process.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.01)
        assert process.poll() is None, "the run ended before it could be killed"
    finally:
        kill(process)
    saved = max(_complete(job / "checkpoints"))
    assert 10 <= saved < rounds
    assert not (job / "model" / "model.bst").exists()

    result = run_trainer(args, env)
    check_ok(result)
    assert "rounds done" in result.stderr and f"Boosting rounds {saved + 1}.." in result.stderr
    booster, metadata = load_model(job / "model")
    assert booster.num_boosted_rounds() == rounds == metadata["num_boosted_rounds"]
    steps = [int(m["global_step"]) for m in read_metrics(metric_file)]
    assert steps[0] > saved and steps[-1] == rounds  # the rerun reported only its own rounds


@pytest.mark.slow  # make test-all: the fast tier keeps one resume (the kill test above)
def test_partial_and_corrupt_checkpoints_are_skipped(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    common = ["--train-data=synthetic:500", "--eval-data=synthetic:200", f"--checkpoint-dir={root}"]
    common += ["--checkpoint-rounds=5", *FAST]
    # The runs are calls in this process (a new process is the kill test's point, not this).
    run = functools.partial(run_in_process, monkeypatch=monkeypatch)
    check_ok(run([*common, "--num-boost-round=10", f"--model-dir={tmp_path / 'm1'}"]))
    assert _complete(root) == [5, 10]
    # A copy interrupted before its marker, and one whose marker vouches for a broken file.
    shutil.copytree(root / "checkpoint-10", root / "checkpoint-15")
    (root / "checkpoint-15" / "COMPLETE").unlink()
    (root / "checkpoint-12").mkdir()
    (root / "checkpoint-12" / "model.ubj").write_bytes(b"not a booster")
    checkpoints.mark_complete(str(root / "checkpoint-12"), 12)

    result = run([*common, "--num-boost-round=20", f"--model-dir={tmp_path / 'm2'}"])
    check_ok(result)
    log = result.stderr
    assert "checkpoint-15: no COMPLETE marker" in log
    assert "checkpoint-12: failed validation" in log
    assert "checkpoint-10: 10 rounds done" in log
    assert load_model(tmp_path / "m2")[0].num_boosted_rounds() == 20

    # Run again after it finished: nothing left to train, same model.
    again = run([*common, "--num-boost-round=20", f"--model-dir={tmp_path / 'm3'}"])
    check_ok(again)
    assert "All 20 rounds were done" in again.stderr
    assert (tmp_path / "m3" / "model.bst").read_bytes() == (
        tmp_path / "m2" / "model.bst"
    ).read_bytes()


@pytest.mark.slow  # make test-all: the fast tier keeps one resume (the kill test above)
@pytest.mark.parametrize("early_stopping", [0, 5])
def test_a_run_rerun_with_more_rounds_ends_with_the_uninterrupted_runs_trees(
    tmp_path, monkeypatch, early_stopping
):
    """Stopped after k rounds, rerun with the full count: the same trees, split values and
    covers (each round's samples drawn again as the uninterrupted run drew them) and the same
    early stop (the runs are calls in this process: the rerun reads the checkpoint from disk)."""
    run = functools.partial(run_in_process, monkeypatch=monkeypatch)
    common = [*SAMPLED, f"--early-stopping-rounds={early_stopping}"]
    rounds = 300 if early_stopping else 30
    check_ok(run([*common, f"--num-boost-round={rounds}", f"--job-dir={tmp_path / 'whole'}"]))
    reference, reference_meta = load_model(tmp_path / "whole" / "model")
    best = reference_meta["best_iteration"]
    if early_stopping:
        assert best is not None and best + 1 + early_stopping < rounds
    cut = best + 3 if early_stopping else 12  # after the best round, before the stop
    job = tmp_path / "parts"
    check_ok(run([*common, f"--num-boost-round={cut}", f"--job-dir={job}"]))
    result = run([*common, f"--num-boost-round={rounds}", f"--job-dir={job}"])
    check_ok(result)
    assert f"{cut} rounds done" in result.stderr
    resumed, resumed_meta = load_model(job / "model")
    assert resumed_meta["best_iteration"] == best
    resumed_trees = resumed.get_dump(with_stats=True)
    assert len(resumed_trees) == (best + 1 if early_stopping else rounds)
    assert resumed_trees == reference.get_dump(with_stats=True)


def test_time_based_checkpoints(tmp_path, monkeypatch):
    # No round-based checkpoints and a tiny --checkpoint-minutes: the timer saves every round or
    # so; pruning keeps the newest two, the older of which only the timer can have written.
    root = tmp_path / "checkpoints"
    args = ["--train-data=synthetic:300", "--eval-data=synthetic:100", f"--job-dir={tmp_path}"]
    args += ["--num-boost-round=30", "--checkpoint-rounds=0", "--checkpoint-minutes=0.00001", *FAST]
    result = run_in_process(args, monkeypatch)
    check_ok(result)
    older, newest = _complete(root)
    assert 20 < older < newest == 30


class Crash(Exception):
    """Stands for a preemption right after a checkpoint was published."""


def _train_in_process(argv: list[str], monkeypatch, crash_at: int | None = None) -> None:
    """``python -m trainer.task`` in this process; with ``crash_at``, die right after the
    checkpoint of that round is complete (before any later callback of the round runs)."""
    from trainer import task

    publish = resume.save_checkpoint

    def save_then_crash(booster, publishing):
        publish(booster, publishing)
        if booster.num_boosted_rounds() == crash_at:
            publishing.wait()  # complete, as a preemption right after it would find it
            raise Crash(crash_at)

    monkeypatch.setattr(resume, "save_checkpoint", save_then_crash)
    if crash_at is None:
        assert task.main(argv) == 0
    else:
        with pytest.raises(Crash):
            task.main(argv)


def test_early_stopping_after_a_crash_stops_where_an_uninterrupted_run_does(tmp_path, monkeypatch):
    """Crash right after the checkpoint of round k, rerun: same stop, best round and model."""
    without_vertex(monkeypatch, CLOUD_ML_HP_METRIC_FILE=str(tmp_path / "metrics"))
    evaluate = "synthetic:300"
    common = ["--train-data=synthetic:800", f"--eval-data={evaluate}", "--eta=0.3", "--max-depth=4"]
    common += ["--early-stopping-rounds=6", "--num-boost-round=400", "--report-rounds=0", *FAST]
    whole = tmp_path / "whole"
    _train_in_process([*common, "--checkpoint-rounds=0", f"--job-dir={whole}"], monkeypatch)
    reference, reference_meta = load_model(whole / "model")
    best = reference_meta["best_iteration"]
    stop = best + 1 + 6  # rounds trained: the best one plus the patience
    assert best is not None and stop < 400
    assert checkpoints.latest_complete(str(whole / "checkpoints")).step == stop

    rows = synthetic_rows(evaluate)
    # Early rounds, the best round itself (its score must survive the crash), just before the
    # stop, and the final checkpoint before the export.
    for crash_at in sorted({1, 5, best, best + 1, best + 2, stop - 1, stop}):
        job = tmp_path / f"crash-{crash_at}"
        argv = [*common, f"--checkpoint-rounds={crash_at}", f"--job-dir={job}"]
        _train_in_process(argv, monkeypatch, crash_at=crash_at)
        _train_in_process(argv, monkeypatch)
        resumed, resumed_meta = load_model(job / "model")
        assert (resumed_meta["best_iteration"], resumed_meta["num_boosted_rounds"]) == (
            best,
            best + 1,
        ), crash_at
        final = checkpoints.latest_complete(str(job / "checkpoints"))
        assert final.step == stop, crash_at  # stopped after the same round
        np.testing.assert_array_equal(resumed.predict(rows), reference.predict(rows))


@pytest.mark.slow
@pytest.mark.parametrize("during", ["evaluation", "checkpoint write"])
def test_notice_during_an_evaluation_or_a_checkpoint_write_saves_that_round(
    tmp_path, monkeypatch, during
):
    """Two SIGTERMs while round 10 is evaluated (its metric report) or its checkpoint written:
    that round is saved complete, the run exits 143, and the rerun ends with the trees of an
    uninterrupted run: not a round lost, the second signal changes nothing."""
    from trainer import model, task

    without_vertex(monkeypatch)
    common = ["--train-data=synthetic:600", "--eval-data=synthetic:200", "--num-boost-round=20"]
    common += ["--report-rounds=5", "--checkpoint-rounds=5", "--subsample=0.7", *FAST]
    whole = tmp_path / "whole"
    assert task.main([*common, f"--job-dir={whole}"]) == 0

    sent = []

    def notice_during(function):
        def wrapped(*args, **kwargs):
            booster = args[0]
            if booster.num_boosted_rounds() == 10 and not sent:
                for _ in range(2):  # a second SIGTERM, as torchrun's agent would forward
                    os.kill(os.getpid(), signal.SIGTERM)
                sent.append(time.monotonic())
            return function(*args, **kwargs)

        return wrapped

    if during == "evaluation":
        monkeypatch.setattr(model, "evaluate", notice_during(model.evaluate))
    else:
        monkeypatch.setattr(resume, "save_checkpoint", notice_during(resume.save_checkpoint))
    job = tmp_path / "job"
    assert task.main([*common, f"--job-dir={job}"]) == preemption.EXIT_CODE
    print(f"SIGTERM during the {during} of round 10 to exit: {time.monotonic() - sent[0]:.2f} s")
    assert checkpoints.latest_complete(str(job / "checkpoints")).step == 10
    assert not (job / "model").exists()
    monkeypatch.undo()
    without_vertex(monkeypatch)
    assert task.main([*common, f"--job-dir={job}"]) == 0
    resumed, reference = load_model(job / "model")[0], load_model(whole / "model")[0]
    assert resumed.get_dump(with_stats=True) == reference.get_dump(with_stats=True)
