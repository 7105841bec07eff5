"""Restarts: a killed run resumes from its newest complete checkpoint; broken ones are skipped."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import PROJECT, base_args, start, trainer_env, wait
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.testing import free_port, kill, read_metrics

from trainer import task

STEPS_PER_EPOCH = 4  # --max-train-samples=64 with --batch-size=16


def _state(checkpoint_dir, step: int) -> dict:
    path = os.path.join(checkpoint_dir, f"checkpoint-{step}", "trainer_state.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _wait_for_complete_checkpoint(process, root, timeout: float) -> int:
    """The step of the first complete checkpoint; the process is SIGKILLed in any case."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            found = checkpoints.list_checkpoints(str(root))
            complete = [c for c in found if checkpoints.problem(c) is None]
            if complete:
                return complete[0].step
            if process.poll() is not None:
                raise AssertionError(f"the run ended (exit {process.returncode}) too early")
            time.sleep(0.05)
        raise AssertionError(f"no complete checkpoint after {timeout} s")
    finally:
        kill(process)  # SIGKILL, like a preempted VM: no chance to clean up


def test_killed_run_resumes_at_a_later_step(tiny_bert, csv_data, tmp_path):
    job = tmp_path / "job"
    epochs = 16
    total = epochs * STEPS_PER_EPOCH
    argv = [
        *base_args(tiny_bert, csv_data, job),
        f"--epochs={epochs}",
        "--max-train-samples=64",
        "--max-eval-samples=16",
        "--save-steps=4",
        "--checkpoint-minutes=0",
    ]
    first = start(argv, tmp_path / "first.log")
    saved = _wait_for_complete_checkpoint(first, job / "checkpoints", timeout=180)
    assert saved < total

    second = start(argv, tmp_path / "second.log")
    assert wait(second, timeout=240) == 0, (tmp_path / "second.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()

    resumed = int(re.search(r"Resuming from checkpoint-(\d+)", log).group(1))
    assert resumed >= saved
    assert f"Training from global step {resumed} to {total}" in log
    assert f"Training finished at global step {total} ({total - resumed} steps in this run)" in log
    # This run's tuning measurements all come after the resumed step.
    steps = [int(r["global_step"]) for r in read_metrics(os.environ["CLOUD_ML_HP_METRIC_FILE"])]
    assert steps and min(steps) > resumed and max(steps) == total
    assert _state(job / "checkpoints", total)["global_step"] == total
    assert (job / "model" / "model.safetensors").is_file()


def test_corrupt_newest_checkpoint_is_skipped(tiny_bert, csv_data, tmp_path, caplog):
    job = tmp_path / "job"
    argv = [*base_args(tiny_bert, csv_data, job), "--max-train-samples=64", "--save-steps=2"]
    assert task.main([*argv, "--max-steps=8"]) == 0
    root = job / "checkpoints"
    assert [c.step for c in checkpoints.list_checkpoints(str(root))] == [6, 8]  # two kept

    # The newest has its marker and right file sizes, but its optimizer state is garbage; a
    # newer folder is empty (a run that died before writing anything).
    optimizer = root / "checkpoint-8" / "optimizer.pt"
    optimizer.write_bytes(b"\0" * optimizer.stat().st_size)
    os.makedirs(root / "checkpoint-20")
    shutil.rmtree(job / "model")

    with caplog.at_level(logging.INFO):
        assert task.main([*argv, "--max-steps=12"]) == 0
    messages = caplog.text
    assert re.search(r"Skipping checkpoint \S*checkpoint-20: no COMPLETE marker", messages)
    assert re.search(r"Skipping checkpoint \S*checkpoint-8: failed validation", messages)
    assert "Resuming from checkpoint-6" in messages
    assert "Training from global step 6 to 12" in messages
    state = _state(root, 12)
    assert state["global_step"] == 12
    logged_steps = [entry["step"] for entry in state["log_history"] if "loss" in entry]
    assert logged_steps[:6] == [1, 2, 3, 4, 5, 6] and logged_steps[6:] == [7, 8, 9, 10, 11, 12]
    assert (job / "model" / "model.safetensors").is_file()


def _fake_checkpoint(folder) -> str:
    """The files Trainer writes, tiny: state, weights, optimizer and scheduler."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4, "log_history": []}))
    save_file({"weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": 4}, folder / "scheduler.pt")
    return str(folder)


def test_validate_rejects_what_would_crash_or_silently_reset_a_resume(tmp_path):
    from trainer import resume

    good = _fake_checkpoint(tmp_path / "good")
    resume.validate(good)  # does not raise

    no_optimizer = _fake_checkpoint(tmp_path / "no-optimizer")
    os.remove(os.path.join(no_optimizer, "optimizer.pt"))
    truncated_state = _fake_checkpoint(tmp_path / "truncated-state")
    path = os.path.join(truncated_state, "trainer_state.json")
    with open(path, "r+", encoding="utf-8") as handle:
        handle.truncate(10)
    truncated_weights = _fake_checkpoint(tmp_path / "truncated-weights")
    path = os.path.join(truncated_weights, "model.safetensors")
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 4)
    for broken in (no_optimizer, truncated_state, truncated_weights):
        try:
            resume.validate(broken)
        except Exception:  # noqa: BLE001 - any error is a rejection
            continue
        raise AssertionError(f"{broken} passed validation")


def test_checkpoint_minutes_request_a_save(tmp_path):
    from transformers import TrainerControl, TrainerState

    from trainer import resume

    now = [0.0]
    mirror = resume.MirrorCheckpoints(str(tmp_path), minutes=1)
    mirror.interval = checkpoints.Interval(1, clock=lambda: now[0])
    control, state = TrainerControl(), TrainerState(global_step=3)
    mirror.on_step_end(None, state, control)
    assert not control.should_save
    now[0] = 61.0
    mirror.on_step_end(None, state, control)
    assert control.should_save


AGREE = """
import json, sys
import torch.distributed as dist
from trainer import resume
dist.init_process_group("gloo")
for root in sys.argv[1:]:
    step, found = resume.agreed_checkpoint(root)
    print(json.dumps({"step": step, "path": found and found.path}))
dist.destroy_process_group()
"""


def _agree(*cases) -> list[list[dict]]:
    """What ``resume.agreed_checkpoint`` returns on each of two gloo ranks, one root each, for
    each case (a pair of roots): both processes, started once, answer every case in turn."""
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", AGREE, *(str(roots[rank]) for roots in cases)],
            cwd=PROJECT,
            env=trainer_env(
                RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        answers.append([json.loads(line) for line in out.strip().splitlines()[-len(cases) :]])
    return [[answers[rank][case] for rank in range(2)] for case in range(len(cases))]


@pytest.mark.slow
@pytest.mark.distributed
def test_nodes_agree_on_one_checkpoint_when_their_newest_differ(tmp_path):
    """Node 1 does not see step 8 complete yet (or at all): both resume from step 4."""
    node0, node1, empty = tmp_path / "node0", tmp_path / "node1", tmp_path / "empty"
    for root, complete in ((node0, (4, 8)), (node1, (4,))):
        for step in (4, 8):
            folder = _fake_checkpoint(root / f"checkpoint-{step}")
            if step in complete:
                checkpoints.mark_complete(folder, step)
    os.makedirs(empty)

    results, without_one = _agree([node0, node1], [node0, empty])
    assert [r["step"] for r in results] == [4, 4]
    assert results[0]["path"] == str(node0 / "checkpoint-4")
    assert results[1]["path"] == str(node1 / "checkpoint-4")

    # A node with no usable checkpoint at all: every node starts afresh.
    assert [r["step"] for r in without_one] == [-1, -1]
