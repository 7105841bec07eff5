"""Chief + worker as two processes on loopback, with the variables Vertex sets on each.

This proves that tf-keras ``model.fit`` works under MultiWorkerMirroredStrategy, that only the
chief writes the model, that the worker's scratch copy is removed, and that both resume from
the same step.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import PROJECT, TINY, reported_epochs, run_tasks
from vertex_trainer_runtime import checkpoints

pytestmark = pytest.mark.distributed

STEPS = 12


def complete_steps(root):
    return [c.step for c in checkpoints.list_checkpoints(str(root)) if not checkpoints.problem(c)]


def test_chief_and_worker(tmp_path):
    job = tmp_path / "job"
    argv = [
        *TINY,
        "--batch-size=8",
        f"--steps-per-epoch={STEPS}",
        "--checkpoint-minutes=0.00001",  # also exercise the workers' agreement on timed saves
        f"--job-dir={job}",
    ]
    chief, worker = run_tasks(tmp_path, [*argv, "--epochs=2"], "first")
    assert "MultiWorkerMirroredStrategy on chief 0: 2 replica(s), global batch 16" in chief

    # Only the chief reports and writes the model; it loads and predicts.
    assert reported_epochs(tmp_path / "first-0.metrics") == [1, 2]
    assert not (tmp_path / "first-1.metrics").exists()
    loaded = tf.saved_model.load(str(job / "model"))
    outputs = loaded.signatures["serving_default"](images=tf.zeros([2, 16, 16, 3]))
    assert outputs["probabilities"].shape == (2, 4)

    # The worker exported to a scratch folder of its own, then removed it.
    scratch = re.search(r"copy of the model to (\S+)", worker).group(1)
    assert scratch.startswith(str(tmp_path / "tmp-first-1"))
    assert list((tmp_path / "tmp-first-1").iterdir()) == []

    # One folder per step with a part per task, saved at the same steps: the timed saves the
    # tasks agree on every 10 steps (10, 20) and the epoch ends (12, 24); the newest two are kept.
    root = job / "checkpoints"
    assert complete_steps(root) == [20, 2 * STEPS]
    for part in ("chief-0", "worker-0"):
        assert (root / f"checkpoint-{2 * STEPS}" / part / checkpoints.MARKER).is_file()

    # As if the job died right after the timed save at step 20 (8 steps into epoch 2): a rerun
    # of both tasks with one more epoch resumes there on both and finishes epoch 2 first.
    (root / f"checkpoint-{2 * STEPS}" / checkpoints.MARKER).unlink()
    logs = run_tasks(tmp_path, [*argv, "--epochs=3", "--checkpoint-minutes=0"], "second")
    for log in logs:
        assert "(step 20, 1 epochs done) and 8 steps of epoch 2" in log
    assert reported_epochs(tmp_path / "second-0.metrics") == [2, 3]
    assert complete_steps(root)[-1] == 3 * STEPS


# The trainer with the test's TFDS builder registered first (as a user's own builder module).
WITH_TFDS_BUILDER = (
    "import runpy, tfds_numbered; runpy.run_module('trainer.task', run_name='__main__')"
)


def test_tfds_dataset_prepared_once_by_the_chief(tmp_path):
    """Both tasks share one TFDS data folder: the chief prepares the dataset while the worker
    waits, then both read it, each its own examples (one file for two workers)."""
    pytest.importorskip("tensorflow_datasets")
    from tfds_numbered import NAME, PREPARE_LOG

    prepare_log = tmp_path / "prepared-by.txt"
    job = tmp_path / "job"
    argv = [
        *TINY,
        f"--train-data=tfds:{NAME}",
        "--eval-data=",
        "--validation-split=0.25",
        f"--tfds-data-dir={tmp_path / 'tfds'}",
        "--image-size=8",
        "--batch-size=4",
        "--epochs=1",
        f"--job-dir={job}",
    ]
    options = {"PYTHONPATH": f"{PROJECT}{os.pathsep}{Path(__file__).parent}"}
    options[PREPARE_LOG] = str(prepare_log)
    run_tasks(tmp_path, argv, "tfds", code=WITH_TFDS_BUILDER, **options)
    assert prepare_log.read_text().splitlines() == ["chief"]
    assert reported_epochs(tmp_path / "tfds-0.metrics") == [1]
    assert (job / "model" / "saved_model.pb").is_file()
