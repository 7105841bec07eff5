"""Restart safety: a killed run resumes at the next epoch (partial checkpoints skipped and a
resume inside an epoch: test_keras_data_order.py)."""

from __future__ import annotations

import logging

from conftest import PROJECT, TINY, reported_epochs, subprocess_env, train
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.trainer_runs import kill_at_first_checkpoint, start_trainer


def test_resumes_after_kill(tmp_path, metrics_file, caplog):
    job = tmp_path / "job"
    # Long enough epochs (~0.5 s) that the kill lands while training goes on.
    argv = [*TINY, "--epochs=4", "--steps-per-epoch=150", f"--job-dir={job}"]
    env = subprocess_env(CLOUD_ML_HP_METRIC_FILE=str(metrics_file))
    process = start_trainer(argv, env, tmp_path / "first.log", PROJECT)
    # SIGKILL right after the first complete checkpoint: no clean-up runs.
    kill_at_first_checkpoint(process, job / "checkpoints", 120, tmp_path / "first.log")
    assert process.returncode < 0, "the run ended before it could be killed"
    done = checkpoints.latest_complete(str(job / "checkpoints")).metadata()["epochs_done"]
    assert 1 <= done < 4
    # The epoch's checkpoint comes before its evaluation: that may not be reported yet.
    before = [done - 1] if done > 1 else []
    assert reported_epochs(metrics_file)[-1:] in (before, [done], [done + 1])
    assert not (job / "model").exists()

    # Vertex reruns the same command: it continues at the next epoch, not from scratch.
    caplog.set_level(logging.INFO)
    assert train(argv) == 0
    assert reported_epochs(metrics_file) == list(range(done + 1, 5))
    assert f"{done} epochs done" in caplog.text
    final = checkpoints.latest_complete(str(job / "checkpoints"))
    assert (final.step, final.metadata()["epochs_done"]) == (4 * 150, 4)
    assert (job / "model" / "saved_model.pb").is_file()
