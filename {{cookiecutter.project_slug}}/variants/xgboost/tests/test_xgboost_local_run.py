"""The XGBoost job through the local emulator (the tools' pytest fixtures): 2 replicas in one
XGBoost collective (tracker on the chief), and the preemption drills (the chief SIGKILLed after a
checkpoint, or sent SIGTERM: it saves the next round; the job rerun). The README's
``make train-local REPLICAS=2`` lines run here as written, with this module's ``ARGS``."""

from __future__ import annotations

import re

import pytest
from conftest import FAST, IMAGE_PACKAGES, load_model
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.pytest_plugin import run_readme_line
from vertex_trainer_tools.testing import DRILL_STEP_SECONDS_ENV
from vertex_trainer_tools.testing import SPOT_GRACE_SECONDS as GRACE_S

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROUNDS = 120
ARGS = ["--train-data=synthetic:4000", "--eval-data=synthetic:1000", f"--num-boost-round={ROUNDS}"]
ARGS += ["--checkpoint-rounds=10", "--report-rounds=10", *FAST]
# The README's commands, run here with ARGS (a known number of rounds for the checks).
REPLICAS_2 = "make train-local REPLICAS=2"
KILL_DRILL = "make train-local REPLICAS=2 KILL_AFTER=checkpoint RESTART_JOB=1"
SIGTERM_DRILL = "make train-local REPLICAS=2 KILL_AFTER=checkpoint KILL_SIGNAL=TERM RESTART_JOB=1"


def final_rounds(output_dir) -> tuple[int, int]:
    """Rounds of the newest complete checkpoint and of the exported model."""
    latest = checkpoints.latest_complete(str(output_dir / "checkpoints"))
    booster, metadata = load_model(output_dir / "model")
    assert booster.num_boosted_rounds() == metadata["num_boosted_rounds"]
    return latest.step, booster.num_boosted_rounds()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, vertex_project):
    """The README's ``make train-local REPLICAS=2`` with ``ARGS``, run once for this module:
    what each replica does, and the trees that every drill's rerun must end with."""
    output_dir = tmp_path_factory.mktemp("uninterrupted") / "out"
    return run_readme_line(vertex_project, REPLICAS_2, output_dir, ARGS, env=IMAGE_PACKAGES)


# The tests that read `uninterrupted` run on one pytest-xdist worker (make test-all's
# --dist loadgroup), so the job runs once.
shares_the_uninterrupted_job = pytest.mark.xdist_group("xgboost-uninterrupted-2-replica-job")


def trees(output_dir) -> list[str]:
    return load_model(output_dir / "model")[0].get_dump()


def saved_round(lines: list[str]) -> int:
    """The round a replica's preemption notice saved (``notice: saved checkpoint-N``)."""
    found = [re.search(r"notice: saved checkpoint-(\d+)", line) for line in lines]
    return int(next(match for match in found if match).group(1))


@shares_the_uninterrupted_job
def test_two_replicas_train_and_only_the_chief_exports(uninterrupted):
    job = uninterrupted
    print(f"xgboost REPLICAS=2 local run: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    assert any("rank 0 of 2" in line for line in job.lines("workerpool0-0"))
    assert any("rank 1 of 2" in line for line in job.lines("workerpool1-0"))
    assert any("does not export" in line for line in job.lines("workerpool1-0"))

    # Only the chief reports (every 10 rounds, then the exported model's value) and exports.
    assert job.reported_steps("workerpool0-0") == [*range(10, ROUNDS + 1, 10), ROUNDS]
    assert not job.metrics_file("workerpool1-0").exists()
    assert final_rounds(job.output_dir) == (ROUNDS, ROUNDS)


@shares_the_uninterrupted_job
def test_kill_drill_resumes_from_the_newest_complete_checkpoint(
    tmp_path, vertex_project, uninterrupted
):
    # XGBoost's collective cannot take a member leaving and rejoining: like Vertex's
    # restart_job_on_worker_restart (RESTART_JOB=1), the runner then restarts every replica.
    job = run_readme_line(vertex_project, KILL_DRILL, tmp_path / "out", ARGS, env=IMAGE_PACKAGES)
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
    # ... so the final model equals an uninterrupted run's.
    assert final_rounds(job.output_dir) == (ROUNDS, ROUNDS)
    assert uninterrupted.returncode == 0, uninterrupted.tail()
    assert trees(job.output_dir) == trees(uninterrupted.output_dir)


@shares_the_uninterrupted_job
def test_sigterm_drill_saves_the_next_round_and_the_rerun_loses_none(
    tmp_path, vertex_project, uninterrupted
):
    out = tmp_path / "out"
    job = run_readme_line(vertex_project, SIGTERM_DRILL, out, ARGS, env=IMAGE_PACKAGES)
    print(f"xgboost REPLICAS=2 SIGTERM drill: {job.seconds:.1f} s")
    assert job.sigterm_to_exit()[0] == 143
    # Both replicas stopped after the same round; the chief saved it and both exited 143.
    rounds = saved_round(job.lines(attempt=1))
    worker = job.lines("workerpool1-0", attempt=1)
    assert any(f"saved checkpoint-{rounds}, exiting" in x and "another" in x for x in worker)
    # Not a round lost: the rerun continues from the round the notice saved ...
    assert any(f"{rounds} rounds done" in x for x in job.lines(attempt=2))
    # ... and ends with the trees of an uninterrupted run.
    assert uninterrupted.returncode == 0, uninterrupted.tail()
    resumed = trees(out)
    assert len(resumed) == ROUNDS and resumed == trees(uninterrupted.output_dir)


# --- A Spot preemption costs at most one round, at real round times ---------------

# The drills' seconds per round (the tools' drill hooks, which every job of the fixtures loads)
STEP_ENV = DRILL_STEP_SECONDS_ENV
SHORT = ["--train-data=synthetic:1000", "--eval-data=synthetic:200", *FAST]


def rounds_logged(lines: list[str]) -> list[int]:
    """The rounds a replica's MetricReporter logged (``--report-rounds=1``: every round)."""
    return [int(m.group(1)) for m in (re.search(r"round (\d+)/\d+: eval", x) for x in lines) if m]


@pytest.mark.parametrize("replicas", [1, 2])
def test_notice_at_5s_rounds_exits_after_the_round_in_progress_and_loses_none(
    tmp_path, kill_and_resume, replicas
):
    """Rounds of 5 s: SIGTERM (after the first round's checkpoint) is acted on at the end of the
    round in progress, that round is saved, the rerun trains exactly the rounds after it."""
    step, rounds = 5.0, 3
    args = [*SHORT, f"--num-boost-round={rounds}", "--checkpoint-rounds=1", "--report-rounds=1"]
    job = kill_and_resume(
        tmp_path / "out",
        args,
        replicas=replicas,
        restart_job=True,
        signal="TERM",
        env={STEP_ENV: str(step)},
    )
    print(f"xgboost REPLICAS={replicas} SIGTERM drill at {step:g} s rounds: {job.seconds:.1f} s")
    code, seconds = job.sigterm_to_exit()
    assert code == 143
    assert seconds <= step + 10, "more than one round (+10 s of a loaded machine) to act"
    first = job.lines(attempt=1)
    saved = saved_round(first)
    # Not a round lost: the last round trained is the one saved; the rerun starts after it.
    assert max(rounds_logged(first)) == saved < rounds
    rerun = job.lines(attempt=2)
    assert any(f"Boosting rounds {saved + 1}..{rounds} of {rounds}" in x for x in rerun), rerun
    assert rounds_logged(rerun) == list(range(saved + 1, rounds + 1))
    assert final_rounds(job.output_dir) == (rounds, rounds)


def test_notice_after_the_last_round_finishes_the_export_and_exits_0(tmp_path, local_job):
    """SIGTERM during the final evaluation (3 s here): evaluation and export fit in the grace
    period, so the replica exports and exits 0; the job is not rerun, nothing retrained."""
    rounds = 1  # slowed to 3 s like the evaluation: only the last round matters here
    # --checkpoint-rounds=0: the final checkpoint is the first; the drill fires after it.
    args = [*SHORT, f"--num-boost-round={rounds}", "--checkpoint-rounds=0"]
    drill = ["--kill-after=checkpoint", "--kill-signal=TERM", f"--kill-grace={GRACE_S:g}"]
    job = local_job(tmp_path / "out", args, runner_args=drill, env={STEP_ENV: "3"})
    print(f"xgboost SIGTERM after the last round: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    assert f"kill drill: SIGTERM to workerpool0-0 after checkpoint-{rounds} was saved" in job.output
    code, _ = job.sigterm_to_exit()
    assert code == 0 and job.attempts() == 1
    assert final_rounds(job.output_dir) == (rounds, rounds)
