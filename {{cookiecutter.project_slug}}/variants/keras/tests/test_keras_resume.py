"""Restart safety: a killed run resumes at the next epoch; partial checkpoints are skipped."""

from __future__ import annotations

import logging
import shutil

import pytest
import tensorflow as tf
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
    assert final.metadata()["epochs_done"] == 4
    assert final.step == 4 * 150
    assert (job / "model" / "saved_model.pb").is_file()


def checkpoint_learning_rate(checkpoint) -> float:
    """The optimizer's learning rate as saved in a checkpoint's files."""
    prefix = f"{checkpoint.path}/ckpt"
    names = [name for name, _ in tf.train.list_variables(prefix)]
    [name] = [n for n in names if n.startswith("optimizer/") and "learning_rate" in n]
    return float(tf.train.load_checkpoint(prefix).get_tensor(name))


@pytest.mark.slow  # make test-all: the fast tier keeps one resume (the kill test above)
def test_rerun_skips_partial_checkpoints_and_resumes_inside_an_epoch_at_its_learning_rate(
    tmp_path, metrics_file, caplog
):
    """A rerun skips the checkpoints without their marker, resumes from a timed checkpoint
    mid-epoch and trains only that epoch's remaining steps, at its own --learning-rate, not the
    checkpoint's."""
    job = tmp_path / "job"
    root = job / "checkpoints"
    argv = [*TINY, "--steps-per-epoch=4", f"--job-dir={job}"]
    # --checkpoint-minutes this small saves after every step; the newest two are kept.
    timed_saves = "--checkpoint-minutes=0.000001"
    assert train([*argv, "--epochs=1", "--learning-rate=0.01", timed_saves]) == 0
    assert [c.step for c in checkpoints.list_checkpoints(str(root))] == [3, 4]
    latest = checkpoints.latest_complete(str(root))
    assert latest.metadata()["epochs_done"] == 1
    assert checkpoint_learning_rate(latest) == pytest.approx(0.01)

    # As if the run died right after the timed save at step 3 of epoch 1 (a copy killed mid-way
    # has no marker), and a newer folder with only part of its files.
    (root / "checkpoint-4" / checkpoints.MARKER).unlink()
    shutil.copytree(root / "checkpoint-3", root / "checkpoint-12")
    (root / "checkpoint-12" / checkpoints.MARKER).unlink()
    next((root / "checkpoint-12").glob("ckpt.data-*")).write_bytes(b"trunc")

    caplog.set_level(logging.INFO)
    assert train([*argv, "--epochs=2", "--learning-rate=0.05"]) == 0
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("checkpoint-12" in message for message in skipped)
    assert any("checkpoint-4" in message for message in skipped)
    assert "(step 3, 0 epochs done) and 3 steps of epoch 1" in caplog.text
    assert "Finishing epoch 1: 1 of its 4 steps remain" in caplog.text
    assert reported_epochs(metrics_file) == [1, 2]
    # Exactly the steps of an uninterrupted 2-epoch run: none lost, none repeated.
    final = checkpoints.latest_complete(str(root))
    assert (final.step, final.metadata()["epochs_done"]) == (8, 2)
    assert checkpoint_learning_rate(final) == pytest.approx(0.05)
