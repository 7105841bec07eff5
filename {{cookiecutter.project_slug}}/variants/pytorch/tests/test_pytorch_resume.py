"""Restarts: a killed run resumes from its newest complete checkpoint; broken ones are skipped."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

from conftest import base_args, start, wait
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.testing import read_metrics
from vertex_trainer_tools.trainer_runs import kill_at_first_checkpoint

from trainer import task

STEPS_PER_EPOCH = 4  # --max-train-samples=64 with --batch-size=16


def _state(checkpoint_dir, step: int) -> dict:
    path = os.path.join(checkpoint_dir, f"checkpoint-{step}", "trainer_state.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


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
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    saved = kill_at_first_checkpoint(start(argv, first), job / "checkpoints", 180, first)
    assert saved < total

    assert wait(start(argv, second), timeout=240) == 0, second.read_text()[-3000:]
    log = second.read_text()

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
