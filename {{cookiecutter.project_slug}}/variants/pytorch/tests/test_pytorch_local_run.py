"""The PyTorch job through the local emulator (the tools' pytest fixtures): 2 replicas as one DDP
job (a torchrun agent per replica), and the preemption drills (the chief SIGKILLed after a
checkpoint, or sent SIGTERM: every rank saves the same next step; then rerun)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import DRILL_STEPS, PROJECT, TWO_REPLICA_JOBS, base_args
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.preemption import DRILL_STEP_SECONDS_ENV
from vertex_trainer_tools.testing import run_local_job

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

# 256 training rows / (2 processes x 16 per batch) = 8 steps per epoch.
STEPS_PER_EPOCH = 8
# The kill drill's job: 2 replicas, 2 epochs, a checkpoint every 4 steps (the first mid-epoch).
EPOCHS = 2
STEPS = EPOCHS * STEPS_PER_EPOCH
SAVE_STEPS = 4
# The kill drill's steps take at least 0.1 s: a dozen steps after the first checkpoint leave the
# drill's signal time to land before the last step on a fast machine.
DRILL_ENV = {DRILL_STEP_SECONDS_ENV: "0.1"}


def trainer_args(tiny_bert, csv_data, epochs, *extra):
    args = [a for a in base_args(tiny_bert, csv_data, "") if not a.startswith("--job-dir")]
    return [*args, f"--epochs={epochs}", *extra]


def final_state(output_dir):
    """(step, epoch) of the newest complete checkpoint, from its trainer_state.json."""
    latest = checkpoints.latest_complete(str(output_dir / "checkpoints"))
    with open(f"{latest.path}/trainer_state.json", encoding="utf-8") as handle:
        state = json.load(handle)
    return latest.step, state["global_step"], state["epoch"]


def make_train_local(output_dir, *variables: str) -> tuple[list[str], list[str]]:
    """Runner flags and trainer flags of ``make train-local VARIABLES``, as make expands them."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "train-local", f"PYTHON={sys.executable}"]
        + [f"OUTPUT_DIR={output_dir}", *variables],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    words = shlex.split(printed.replace("\\\n", " "))
    split = words.index("--")
    return words[words.index("local-run") + 1 : split], words[split + 1 :]


def test_make_train_local_replicas_2_with_its_defaults(tmp_path):
    """`make train-local REPLICAS=2` with the Makefile's default flags: the scratch model.

    Every node builds the scratch model before its workers start (inside them only global rank
    0 could write it), and the checkpoint holds the RNG state of both ranks. One epoch of the
    default three: that the defaults learn is checked by running the README's commands.
    """
    runner_args, trainer_args = make_train_local(tmp_path / "out", "REPLICAS=2", "ARGS=--epochs=1")
    assert "--replicas=2" in runner_args and "--model-name-or-path=scratch" in trainer_args
    job = run_local_job(tmp_path / "out", runner_args, trainer_args)
    print(f"pytorch make train-local REPLICAS=2: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    for name in ("workerpool0-0", "workerpool1-0"):
        loaded = [line for line in job.lines(name) if "scratch-model; new" in line]
        assert loaded, f"{name} did not load its scratch model:\n" + job.tail()
    assert (job.output_dir / "model" / "model.safetensors").is_file()
    assert job.reported_steps("workerpool0-0"), job.tail()

    latest = checkpoints.latest_complete(str(job.output_dir / "checkpoints"))
    assert latest is not None, job.tail()
    listed = checkpoints.listed_files(latest)
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(listed), listed
    assert "rng_state.pth" not in listed
    # Cloud Logging shows raw escape codes: none in the default logs.
    assert "\x1b[" not in job.output


def drill_args(tiny_bert, csv_data):
    return trainer_args(tiny_bert, csv_data, EPOCHS, f"--save-steps={SAVE_STEPS}")


@TWO_REPLICA_JOBS
def test_two_replicas_train_and_only_the_chief_exports(uninterrupted_2_replicas):
    """The SIGTERM drill's job never stopped (conftest.py): 5 steps, evaluated at the end."""
    job = uninterrupted_2_replicas
    print(f"pytorch REPLICAS=2 local run: {job.seconds:.1f} s")
    assert job.returncode == 0, job.tail()
    assert any("Processes: 2" in line for line in job.lines("workerpool0-0"))
    for name, rank in (("workerpool0-0", 0), ("workerpool1-0", 1)):
        launch = [line for line in job.lines(name) if "torchrun" in line]
        assert launch and f"--node-rank={rank}" in launch[0], job.tail()

    # Only rank 0 reports and exports.
    assert job.reported_steps("workerpool0-0") == [DRILL_STEPS]
    assert not job.metrics_file("workerpool1-0").exists()
    assert (job.output_dir / "model" / "model.safetensors").is_file()
    assert any("Model exported to" in line for line in job.lines("workerpool0-0"))
    assert not any("Model exported to" in line for line in job.lines("workerpool1-0"))
    assert final_state(job.output_dir) == (DRILL_STEPS, DRILL_STEPS, DRILL_STEPS / STEPS_PER_EPOCH)
    # Each rank's RNG state is in the checkpoint, not only those of the chief's node.
    latest = checkpoints.latest_complete(str(job.output_dir / "checkpoints"))
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(checkpoints.listed_files(latest))


def test_kill_drill_resumes_from_the_newest_complete_checkpoint(
    tiny_bert, csv_data, tmp_path, kill_and_resume
):
    # A whole-job restart on fresh ports: rerunning only the chief also works, but the other
    # replica's torchrun agent may then reach the new chief's rendezvous store on the same
    # address before it exits, which can leave the static rendezvous waiting.
    args = drill_args(tiny_bert, csv_data)
    job = kill_and_resume(tmp_path / "out", args, replicas=2, restart_job=True, env=DRILL_ENV)
    print(f"pytorch REPLICAS=2 kill drill: {job.seconds:.1f} s")
    assert "kill drill: SIGKILL to workerpool0-0 after checkpoint-" in job.output
    assert job.attempts("workerpool1-0") == 2

    # Both ranks of the rerun restored the same complete checkpoint, not step 0 ...
    restored = {}
    for name in ("workerpool0-0", "workerpool1-0"):
        last = job.attempts(name)
        found = [
            re.search(r"Restored checkpoint \S+/checkpoint-(\d+) \(global step (\d+)\)", line)
            for line in job.lines(name, attempt=last)
        ]
        found = [match for match in found if match]
        assert found, f"{name} did not resume:\n" + "\n".join(job.lines(name, attempt=last))
        restored[name] = int(found[0].group(2))
    assert restored["workerpool0-0"] == restored["workerpool1-0"]
    restored_step = restored["workerpool0-0"]
    assert SAVE_STEPS <= restored_step < STEPS and restored_step % SAVE_STEPS == 0
    # ... and the final state equals an uninterrupted run's: same steps, same epochs.
    assert final_state(job.output_dir) == (STEPS, STEPS, float(EPOCHS))
    assert job.reported_steps("workerpool0-0")[-1] == STEPS
    assert (job.output_dir / "model" / "model.safetensors").is_file()


def test_a_reduction_server_in_pool_2_is_no_rank(
    tiny_bert, csv_data, tmp_path, local_job, reduction_server_config
):
    # vertex.yaml with job.reduction_server: 2 (idle) reducers in CLUSTER_SPEC's workerpool2.
    runner_args = [f"--config={reduction_server_config}"]
    args = trainer_args(tiny_bert, csv_data, 1)
    job = local_job(tmp_path / "out", args, replicas=2, runner_args=runner_args)
    assert job.returncode == 0, job.tail()
    assert any("Processes: 2" in line for line in job.lines("workerpool0-0")), job.tail()
    assert any("idle" in line for line in job.lines("workerpool2-1"))
    assert (job.output_dir / "model" / "model.safetensors").is_file()


@TWO_REPLICA_JOBS
def test_sigterm_drill_saves_an_agreed_step_and_ends_with_uninterrupted_weights(
    sigterm_drill_2_replicas, uninterrupted_2_replicas
):
    """The SIGTERM drill at 2.5 s a step of test_pytorch_notice_drills.py (conftest.py)."""
    from safetensors.torch import load_file

    job = sigterm_drill_2_replicas
    print(f"pytorch REPLICAS=2 SIGTERM drill: {job.seconds:.1f} s")
    # torchrun forwarded the SIGTERM; both ranks saved the same step, and only then exited.
    saved = re.findall(r"notice: saved checkpoint-(\d+), exiting", job.output)
    assert len(saved) == 2 and len(set(saved)) == 1, job.tail()
    step = int(saved[0])
    assert any("another replica" in line for line in job.lines("workerpool1-0", attempt=1))
    assert any(f"global step {step})" in line for line in job.lines(attempt=2)), job.tail()
    whole = uninterrupted_2_replicas
    assert whole.returncode == 0, whole.tail()
    assert final_state(job.output_dir) == final_state(whole.output_dir)
    # The rerun lost no step and ends with the weights of a run that was never stopped.
    expected, weights = (
        load_file(str(d / "model" / "model.safetensors"))
        for d in (whole.output_dir, job.output_dir)
    )
    assert max((weights[k] - expected[k]).abs().max().item() for k in expected) == 0.0
