"""The PyTorch job through the local emulator (the tools' pytest fixtures): 2 replicas as one DDP
job (a torchrun agent per replica) and the preemption drills. The chief SIGKILLed after a
checkpoint; SIGTERM as Compute Engine sends it (SIGKILL 30 s later) at real step times (the
tools' drill hooks, ``DRILL_STEP_SECONDS_ENV``): every rank saves the same step, the one running
when SIGTERM came or the next, and the rerun resumes there and loses no step; a notice after the
last step; a worker whose chief is gone."""

from __future__ import annotations

import json
import re

import pytest
from conftest import PROJECT, base_args, reviews, write_csv
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.pytest_plugin import run_readme_line
from vertex_trainer_tools.testing import CHIEF, DRILL_STEP_SECONDS_ENV

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

WORKER = "workerpool1-0"
STEPS_PER_EPOCH = 8  # 256 training rows / (2 processes x 16 per batch)
RESTORED = r"Restored checkpoint \S+ \(global step (\d+)\)"
DRILL_STEPS = 5  # a checkpoint after every step; the notice comes in step 2 or 3
GRACE = 30.0  # Compute Engine stops a preempted VM about 30 s after its SIGTERM
REPLICAS_2 = "make train-local REPLICAS=2"  # the README's line, with this test's ARGS and CONFIG


def drill_args(tiny_bert: str, csv_data: dict, *extra: str) -> list[str]:
    """Trainer flags of the local emulator's jobs: the tiny model, its data, no timed save."""
    args = [a for a in base_args(tiny_bert, csv_data, "") if not a.startswith("--job-dir")]
    return [*args, "--checkpoint-minutes=0", *extra]


def sigterm_drill_args(tiny_bert: str, csv_data: dict) -> list[str]:
    return drill_args(tiny_bert, csv_data, f"--max-steps={DRILL_STEPS}", "--save-steps=1")


def final_state(output_dir):
    """(step, global step, epoch) of the newest complete checkpoint (its trainer_state.json)."""
    latest = checkpoints.latest_complete(str(output_dir / "checkpoints"))
    with open(f"{latest.path}/trainer_state.json", encoding="utf-8") as handle:
        state = json.load(handle)
    return latest.step, state["global_step"], state["epoch"]


def one_number(pattern: str, lines: list[str]) -> int:
    found = [int(m.group(1)) for m in (re.search(pattern, line) for line in lines) if m]
    assert found, f"no line matches {pattern!r}:\n" + "\n".join(lines[-40:])
    return found[0]


def test_make_train_local_replicas_2_with_its_defaults_and_a_reduction_server(
    tmp_path, reduction_server_config
):
    """The README's `make train-local REPLICAS=2` with the Makefile's default flags (the scratch
    model), and vertex.yaml's job.reduction_server: 2 idle reducers in CLUSTER_SPEC's
    workerpool2, no rank.

    Every node builds the scratch model before its workers start (inside them only global rank
    0 could write it), and the checkpoint holds the RNG state of both ranks. One epoch of the
    default three: that the defaults learn is checked by running the README's drills.
    """
    config = reduction_server_config
    job = run_readme_line(PROJECT, REPLICAS_2, tmp_path / "out", ["--epochs=1"], config=config)
    print(f"pytorch make train-local REPLICAS=2: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    for name in (CHIEF, WORKER):
        loaded = [line for line in job.lines(name) if "scratch-model; new" in line]
        assert loaded, f"{name} did not load its scratch model:\n" + job.tail()
    assert any("Processes: 2" in line for line in job.lines(CHIEF)), job.tail()
    assert any("idle" in line for line in job.lines("workerpool2-1"))
    assert (job.output_dir / "model" / "model.safetensors").is_file()
    assert job.reported_steps(CHIEF), job.tail()

    latest = checkpoints.latest_complete(str(job.output_dir / "checkpoints"))
    assert latest is not None, job.tail()
    listed = checkpoints.listed_files(latest)
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(listed), listed
    assert "rng_state.pth" not in listed
    # Cloud Logging shows raw escape codes: none in the default logs.
    assert "\x1b[" not in job.output


def test_two_replicas_train_one_ddp_job_and_a_sigterm_drill_ends_as_if_never_stopped(
    tiny_bert, csv_data, tmp_path, local_job, kill_and_resume
):
    """The SIGTERM drill's job on 2 replicas never stopped: 5 steps, evaluated at the end; the
    emulator sets Vertex's WORLD_SIZE/RANK (node counts), which must not be used as-is. Then
    the drill at 2.5 s a step: torchrun forwarded the SIGTERM, both ranks saved the same step,
    then exited, and the rerun ends with the uninterrupted job's state and weights."""
    from safetensors.torch import load_file

    whole = local_job(tmp_path / "whole", sigterm_drill_args(tiny_bert, csv_data), replicas=2)
    print(f"pytorch REPLICAS=2 local run: {whole.seconds:.1f} s")
    assert whole.returncode == 0, whole.tail()
    assert any("Processes: 2" in line for line in whole.lines(CHIEF))
    for name, rank in ((CHIEF, 0), (WORKER, 1)):
        launch = [line for line in whole.lines(name) if "torchrun" in line]
        assert launch and f"--node-rank={rank}" in launch[0], whole.tail()

    # Only rank 0 reports and exports.
    assert whole.reported_steps(CHIEF) == [DRILL_STEPS]
    assert not whole.metrics_file(WORKER).exists()
    assert (whole.output_dir / "model" / "model.safetensors").is_file()
    assert any("Model exported to" in line for line in whole.lines(CHIEF))
    assert not any("Model exported to" in line for line in whole.lines(WORKER))
    # One job of 2 processes: 16 examples per process and step, 8 steps an epoch, not 16.
    final = (DRILL_STEPS, DRILL_STEPS, DRILL_STEPS / STEPS_PER_EPOCH)
    assert final_state(whole.output_dir) == final
    # Each rank's RNG state is in the checkpoint, not only those of the chief's node.
    latest = checkpoints.latest_complete(str(whole.output_dir / "checkpoints"))
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(checkpoints.listed_files(latest))
    # The loss is averaged, not summed, over processes: ln 2 ~ 0.69 for two balanced classes.
    with open(f"{latest.path}/trainer_state.json", encoding="utf-8") as handle:
        history = json.load(handle)["log_history"]
    first_loss = next(entry["loss"] for entry in history if "loss" in entry)
    assert 0.55 < first_loss < 0.85, f"first loss {first_loss}: scaled by the process count?"

    job = sigterm_drill(tiny_bert, csv_data, tmp_path, kill_and_resume, replicas=2)
    print(f"pytorch REPLICAS=2 SIGTERM drill: {job.seconds:.1f} s")
    saved = step_saved_on_notice(job, replicas=2)
    assert any("another replica" in line for line in job.lines(WORKER, attempt=1))
    assert any(f"global step {saved})" in line for line in job.lines(attempt=2)), job.tail()
    assert final_state(job.output_dir) == final_state(whole.output_dir)
    # The rerun lost no step and ends with the weights of a run that was never stopped.
    expected, weights = (
        load_file(str(d / "model" / "model.safetensors"))
        for d in (whole.output_dir, job.output_dir)
    )
    assert max((weights[k] - expected[k]).abs().max().item() for k in expected) == 0.0


def test_kill_drill_resumes_from_the_newest_complete_checkpoint(
    tiny_bert, csv_data, tmp_path, kill_and_resume
):
    # A whole-job restart on fresh ports: rerunning only the chief also works, but the other
    # replica's torchrun agent may then reach the new chief's rendezvous store on the same
    # address before it exits, which can leave the static rendezvous waiting.
    epochs, save_steps = 2, 4  # a checkpoint every 4 steps, the first mid-epoch
    steps = epochs * STEPS_PER_EPOCH
    args = drill_args(tiny_bert, csv_data, f"--epochs={epochs}", f"--save-steps={save_steps}")
    # Steps of at least 0.1 s: a dozen after the first checkpoint leave the drill's signal time
    # to land before the last step on a fast machine.
    env = {DRILL_STEP_SECONDS_ENV: "0.1"}
    job = kill_and_resume(tmp_path / "out", args, replicas=2, restart_job=True, env=env)
    print(f"pytorch REPLICAS=2 kill drill: {job.seconds:.1f} s")
    assert f"kill drill: SIGKILL to {CHIEF} after checkpoint-" in job.output
    assert job.attempts(WORKER) == 2

    # Both ranks of the rerun restored the same complete checkpoint, not step 0 ...
    restored = [
        one_number(RESTORED, job.lines(name, attempt=job.attempts(name)))
        for name in (CHIEF, WORKER)
    ]
    assert restored[0] == restored[1], restored
    assert save_steps <= restored[0] < steps and restored[0] % save_steps == 0
    # ... and the final state equals an uninterrupted run's: same steps, same epochs.
    assert final_state(job.output_dir) == (steps, steps, float(epochs))
    assert job.reported_steps(CHIEF)[-1] == steps
    assert (job.output_dir / "model" / "model.safetensors").is_file()


def sigterm_drill(tiny_bert, csv_data, tmp_path, kill_and_resume, replicas: int):
    """SIGTERM to the chief once its first checkpoint is complete, at 2.5 s a step, then the
    whole job rerun."""
    return kill_and_resume(
        tmp_path / "out",
        sigterm_drill_args(tiny_bert, csv_data),
        replicas=replicas,
        restart_job=True,
        signal="TERM",
        grace=GRACE,
        env={DRILL_STEP_SECONDS_ENV: "2.5"},
    )


def step_saved_on_notice(job, replicas: int) -> int:
    """The step every rank saved on SIGTERM at step 2 or 3 of 5: that step or the next (not
    step 21, as when the ranks first agreed after 20 steps); the rerun started there."""
    code, _ = job.sigterm_to_exit(CHIEF, GRACE)
    assert code == 143, job.tail()
    running = one_number(r"SIGTERM came during step (\d+)", job.lines(CHIEF, attempt=1))
    saved = re.findall(r"notice: saved checkpoint-(\d+), exiting", job.output)
    assert len(saved) == replicas and len(set(saved)) == 1, job.tail()  # every rank: one step
    saved = int(saved[0])
    assert running <= saved <= running + 1 < DRILL_STEPS, job.tail()
    # The rerun starts at the saved step: no step lost, and none trained twice.
    second = job.lines(CHIEF, attempt=2)
    assert one_number(RESTORED, second) == saved
    assert any(f"Training from global step {saved} to {DRILL_STEPS}" in line for line in second)
    assert checkpoints.latest_complete(str(job.output_dir / "checkpoints")).step == DRILL_STEPS
    assert (job.output_dir / "model" / "model.safetensors").is_file()
    return saved


def test_a_notice_in_the_first_steps_of_an_attempt_at_2_5_s_steps_loses_no_step(
    tiny_bert, csv_data, tmp_path, kill_and_resume
):
    """The SIGTERM drill on 1 replica (on 2: the test above). Its logs are the default ones:
    Cloud Logging makes an entry of each line and shows escape codes raw."""
    job = sigterm_drill(tiny_bert, csv_data, tmp_path, kill_and_resume, replicas=1)
    step_saved_on_notice(job, replicas=1)
    log = "\n".join(job.lines())
    assert "\x1b" not in log
    assert "LOAD REPORT" not in log and "MISSING" not in log
    assert "new, randomly initialised: classifier" in log


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
    code, _ = job.sigterm_to_exit(CHIEF, GRACE)
    assert code == 0, job.tail()
    assert job.attempts(CHIEF) == 1 and job.attempts(WORKER) == 1, job.tail()
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
    env = {DRILL_STEP_SECONDS_ENV: "1"}
    job = kill_and_resume(tmp_path / "out", args, replicas=2, restart_job=False, env=env)
    found = re.search(rf"{WORKER} exited (-?\d+) \(([\d.]+)s after the kill drill\)", job.output)
    assert found, job.tail()
    seconds = float(found.group(2))
    print(f"pytorch REPLICAS=2 chief gone: the worker exited {seconds:.1f} s after it")
    assert seconds < GRACE, job.tail()
    assert job.attempts(WORKER) == 2, job.tail()
    # Both ranks of the rerun resumed from the same complete checkpoint, and training ended.
    restored = [one_number(RESTORED, job.lines(name, attempt=2)) for name in (CHIEF, WORKER)]
    assert restored[0] == restored[1] >= 2, job.tail()
    assert checkpoints.latest_complete(str(job.output_dir / "checkpoints")).step == 6
    assert (job.output_dir / "model" / "model.safetensors").is_file()
