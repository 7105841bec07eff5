"""The XGBoost job through the local emulator (the tools' pytest fixtures): 2 replicas in one
XGBoost collective (tracker on the chief), and the preemption drills (the chief SIGKILLed after a
checkpoint, or sent SIGTERM: it saves the next round; the job rerun)."""

from __future__ import annotations

import re

import pytest
from conftest import FAST, load_model

from trainer import checkpoints

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROUNDS = 120
ARGS = [
    "--train-data=synthetic:4000",
    "--eval-data=synthetic:1000",
    f"--num-boost-round={ROUNDS}",
    "--checkpoint-rounds=10",
    "--report-rounds=10",
    *FAST,
]


def final_rounds(output_dir) -> tuple[int, int]:
    """Rounds of the newest complete checkpoint and of the exported model."""
    latest = checkpoints.latest_complete(str(output_dir / "checkpoints"))
    booster, metadata = load_model(output_dir / "model")
    assert booster.num_boosted_rounds() == metadata["num_boosted_rounds"]
    return latest.step, booster.num_boosted_rounds()


def test_two_replicas_train_and_only_the_chief_exports(tmp_path, local_job):
    job = local_job(tmp_path / "out", ARGS, replicas=2)
    print(f"xgboost REPLICAS=2 local run: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    assert any("rank 0 of 2" in line for line in job.lines("workerpool0-0"))
    assert any("rank 1 of 2" in line for line in job.lines("workerpool1-0"))
    assert any("does not export" in line for line in job.lines("workerpool1-0"))

    # Only the chief reports (every 10 rounds, then the exported model's value) and exports.
    assert job.reported_steps("workerpool0-0") == [*range(10, ROUNDS + 1, 10), ROUNDS]
    assert not job.metrics_file("workerpool1-0").exists()
    assert final_rounds(job.output_dir) == (ROUNDS, ROUNDS)


def test_kill_drill_resumes_from_the_newest_complete_checkpoint(tmp_path, kill_and_resume):
    # XGBoost's collective cannot take a member leaving and rejoining: like Vertex's
    # restart_job_on_worker_restart, the runner then restarts every replica.
    job = kill_and_resume(tmp_path / "out", ARGS, replicas=2, restart_job=True)
    print(f"xgboost REPLICAS=2 kill drill: {job.seconds:.1f} s")
    assert "kill drill: SIGKILL to workerpool0-0 after checkpoint-" in job.output
    assert job.attempts("workerpool1-0") == 2

    # The rerun chief resumed from a complete checkpoint and boosted only the missing rounds ...
    rerun = job.lines("workerpool0-0", attempt=2)
    pattern = re.compile(r"Resuming from \S+/checkpoint-(\d+): (\d+) rounds done")
    resumed = [pattern.search(line) for line in rerun]
    resumed = [match for match in resumed if match]
    assert resumed, "\n".join(rerun)[-3000:]
    done = int(resumed[0].group(2))
    assert 10 <= done < ROUNDS and done % 10 == 0
    assert any(f"Boosting rounds {done + 1}..{ROUNDS} of {ROUNDS}" in x for x in rerun)
    assert any(f"Boosting rounds {done + 1}..{ROUNDS}" in x for x in job.lines("workerpool1-0", 2))
    assert job.reported_steps("workerpool0-0") == [*range(done + 10, ROUNDS + 1, 10), ROUNDS]
    # ... so the final model equals an uninterrupted run's in rounds.
    assert final_rounds(job.output_dir) == (ROUNDS, ROUNDS)


def test_sigterm_drill_saves_the_next_round_and_the_rerun_loses_none(
    tmp_path, kill_and_resume, local_job
):
    out = tmp_path / "out"
    job = kill_and_resume(out, ARGS, replicas=2, restart_job=True, signal="TERM")
    print(f"xgboost REPLICAS=2 SIGTERM drill: {job.seconds:.1f} s")
    # Both replicas stopped after the same round; the chief saved it and both exited 143.
    saved = [re.search(r"notice: saved checkpoint-(\d+)", x) for x in job.lines(attempt=1)]
    rounds = int(next(match for match in saved if match).group(1))
    worker = job.lines("workerpool1-0", attempt=1)
    assert any(f"saved checkpoint-{rounds}, exiting" in x and "another" in x for x in worker)
    # Not a round lost: the rerun continues from the round the notice saved ...
    assert any(f"{rounds} rounds done" in x for x in job.lines(attempt=2))
    # ... and ends with the trees of an uninterrupted run.
    reference = local_job(tmp_path / "whole", ARGS, replicas=2)
    assert reference.returncode == 0, reference.tail()
    trees = [load_model(folder / "model")[0].get_dump() for folder in (out, tmp_path / "whole")]
    assert len(trees[0]) == ROUNDS and trees[0] == trees[1]
