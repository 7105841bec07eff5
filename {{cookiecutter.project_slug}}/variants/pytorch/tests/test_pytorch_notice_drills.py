"""Preemption notices at real step times, through the local emulator (the tools' fixtures).

Each drill sends SIGTERM as Compute Engine does (SIGKILL 30 s later), prints how long the
replica took from SIGTERM to its exit, and fails if a single training step is lost: the rerun
must resume from the step that was running when SIGTERM came, or the next one. Steps are
slowed to a real step time with ``VERTEX_TRAINER_DRILL_STEP_SECONDS``.
"""

from __future__ import annotations

import re

import pytest
from conftest import (
    DRILL_STEP_SECONDS,
    DRILL_STEPS,
    GRACE,
    TWO_REPLICA_JOBS,
    drill_args,
    reviews,
    sigterm_drill_args,
    write_csv,
)
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.preemption import DRILL_STEP_SECONDS_ENV

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

CHIEF = "workerpool0-0"


def seconds_to_exit(job, what: str) -> tuple[int, float]:
    """(exit code, seconds) of the chief after the drill's SIGTERM; printed for the record."""
    found = re.search(rf"kill drill: {CHIEF} exited (-?\d+) ([\d.]+)s after SIGTERM", job.output)
    assert found, job.tail()
    code, seconds = int(found.group(1)), float(found.group(2))
    print(f"pytorch {what}: exit {code} {seconds:.1f} s after SIGTERM")
    assert seconds < GRACE, job.tail()
    return code, seconds


def one_number(pattern: str, lines: list[str]) -> int:
    found = [int(m.group(1)) for m in (re.search(pattern, line) for line in lines) if m]
    assert found, f"no line matches {pattern!r}:\n" + "\n".join(lines[-40:])
    return found[0]


@pytest.mark.parametrize("replicas", [1, pytest.param(2, marks=TWO_REPLICA_JOBS)])
def test_a_notice_in_the_first_steps_of_an_attempt_at_2_5_s_steps_loses_no_step(
    replicas, tiny_bert, csv_data, tmp_path, kill_and_resume, request
):
    """SIGTERM at step 2 or 3 of 5, at 2.5 s a step: every rank saves that step or the next
    (not step 21, as when the ranks first agreed after 20 steps) and the rerun starts there.
    The drill on 2 replicas is shared with test_pytorch_local_run.py (conftest.py)."""
    steps = DRILL_STEPS
    if replicas == 2:
        job = request.getfixturevalue("sigterm_drill_2_replicas")
    else:
        job = kill_and_resume(
            tmp_path / "out",
            sigterm_drill_args(tiny_bert, csv_data),
            replicas=replicas,
            restart_job=True,
            signal="TERM",
            grace=GRACE,
            env={DRILL_STEP_SECONDS_ENV: DRILL_STEP_SECONDS},
        )
    code, _ = seconds_to_exit(job, f"REPLICAS={replicas} notice at 2.5 s a step")
    assert code == 143, job.tail()
    first = job.lines(CHIEF, attempt=1)
    running = one_number(r"SIGTERM came during step (\d+)", first)
    saved = re.findall(r"notice: saved checkpoint-(\d+), exiting", job.output)
    assert len(saved) == replicas and len(set(saved)) == 1, job.tail()  # every rank: one step
    saved = int(saved[0])
    assert running <= saved <= running + 1 < steps, job.tail()
    # The rerun starts at the saved step: no step lost, and none trained twice.
    second = job.lines(CHIEF, attempt=2)
    assert one_number(r"Restored checkpoint \S+ \(global step (\d+)\)", second) == saved
    assert any(f"Training from global step {saved} to {steps}" in line for line in second)
    assert checkpoints.latest_complete(str(job.output_dir / "checkpoints")).step == steps
    assert (job.output_dir / "model" / "model.safetensors").is_file()


def test_a_notice_after_the_last_step_finishes_the_export_and_exits_0_on_2_replicas(
    tiny_bert, csv_data, tmp_path, local_job
):
    """SIGTERM once the final checkpoint is complete, during the final evaluation and export:
    both fit in the grace period, so every replica (and torchrun's agent) exits 0, no rerun."""
    # A longer evaluation set keeps the chief busy for a few seconds after its last step.
    eval_csv = write_csv(tmp_path / "eval.csv", reviews(3000, seed=3))
    args = drill_args(tiny_bert, {**csv_data, "eval": eval_csv}, "--max-steps=4", "--save-steps=2")
    drill = ["--kill-after=checkpoint:2", f"--kill-replica={CHIEF}", "--kill-signal=TERM"]
    drill += [f"--kill-grace={GRACE:g}", "--restart-job-on-worker-restart"]
    job = local_job(tmp_path / "out", args, replicas=2, runner_args=drill)
    assert job.returncode == 0, job.tail()
    assert f"kill drill: SIGTERM to {CHIEF} after " in job.output, job.tail()
    code, _ = seconds_to_exit(job, "REPLICAS=2 notice after the last step")
    assert code == 0, job.tail()
    assert job.attempts(CHIEF) == 1 and job.attempts("workerpool1-0") == 1, job.tail()
    assert checkpoints.latest_complete(str(job.output_dir / "checkpoints")).step == 4
    assert job.reported_steps(CHIEF) == [4], job.tail()
    assert (job.output_dir / "model" / "model.safetensors").is_file()


def test_a_worker_whose_chief_is_gone_exits_by_itself_within_the_grace_period(
    tiny_bert, csv_data, tmp_path, kill_and_resume
):
    """The chief's VM is gone (SIGKILL) and only the chief is rerun (no
    restart_job_on_worker_restart): nothing signals the worker, which must see that its chief
    is gone and exit within the grace period, so that it is rerun and joins the new chief."""
    args = drill_args(tiny_bert, csv_data, "--max-steps=6", "--save-steps=2")
    job = kill_and_resume(
        tmp_path / "out",
        args,
        replicas=2,
        restart_job=False,
        env={DRILL_STEP_SECONDS_ENV: "1"},
    )
    found = re.search(
        r"workerpool1-0 exited (-?\d+) \(([\d.]+)s after the kill drill\)", job.output
    )
    assert found, job.tail()
    seconds = float(found.group(2))
    print(f"pytorch REPLICAS=2 chief gone: the worker exited {seconds:.1f} s after it")
    assert seconds < GRACE, job.tail()
    assert job.attempts("workerpool1-0") == 2, job.tail()
    # Both ranks of the rerun resumed from the same complete checkpoint, and training ended.
    restored = [
        one_number(r"Restored checkpoint \S+ \(global step (\d+)\)", job.lines(name, attempt=2))
        for name in (CHIEF, "workerpool1-0")
    ]
    assert restored[0] == restored[1] >= 2, job.tail()
    assert checkpoints.latest_complete(str(job.output_dir / "checkpoints")).step == 6
    assert (job.output_dir / "model" / "model.safetensors").is_file()
