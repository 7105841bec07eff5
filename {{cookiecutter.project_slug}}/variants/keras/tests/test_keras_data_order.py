"""Data order: a pass over the data trains on every example once, and a resumed run is the
same run (the same batches in the same order, hence the same weights). The passes themselves
are the runtime's (vertex_trainer_runtime.keras.passes, tested in vertex-trainer-runtime on a
numbered source; on a TFDS source: test_keras_data.py); here, on the trainer's own runs."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import PROJECT, TINY, reported_epochs, run_tasks, subprocess_env
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.keras import training_state
from vertex_trainer_tools.trainer_runs import run_replicas

SITECUSTOMIZE = '''
"""Test hook of test_keras_data_order.py: end the process right after the checkpoint of a step,
as a preemption would, on every task."""
import os

from vertex_trainer_runtime.keras import training_state

_save = training_state.TrainingState.save


def _save_then_stop(self, epochs_done, steps_into_epoch=0):
    _save(self, epochs_done, steps_into_epoch)
    if self.step == int(os.environ["STOP_AFTER_STEP"]):
        self.publisher.wait()  # published in the background: complete before the end
        os._exit(137)


training_state.TrainingState.save = _save_then_stop
'''

EXAMPLES, BATCH, EPOCHS = 501, 8, 2  # stopped in epoch 2, the last: resumed, it ends it
ARGS = [*TINY, f"--synthetic-examples={EXAMPLES}", f"--batch-size={BATCH}", f"--epochs={EPOCHS}"]
# What TensorFlow prints on CPU at its import (2.17) or first device query (2.21): INFO banners,
# meaningless "Unable to register", the CUDA probe's failure.
NOISE = (
    "Unable to register cu",
    "oneDNN custom operations",
    "cpu_feature_guard",
    "Could not find cuda drivers",
    "failed call to cuInit",
    "Could not find TensorRT",
)


def _final_weights(root, part: str = "") -> dict[str, np.ndarray]:
    """The model's variables in the newest checkpoint under ``root`` (a task's ``part`` of it)."""
    latest = checkpoints.latest_complete(str(root))
    prefix = os.path.join(latest.path, part, training_state.FILE_PREFIX)
    reader = tf.train.load_checkpoint(prefix)
    names = [name for name, _ in tf.train.list_variables(prefix)]
    return {name: reader.get_tensor(name) for name in names if name.startswith("model/")}


@pytest.mark.slow
def test_stopped_mid_epoch_and_resumed_ends_with_the_same_weights(
    tmp_path, sitecustomize, monkeypatch
):
    """501 examples (no batch divides them), stopped right after a timed checkpoint inside
    epoch 2, rerun (newer partial checkpoints skipped): the same final weights, bit for bit, as
    a run never stopped (on 2 replicas: test_keras_local_run.py's SIGTERM drill). That run logs
    at TensorFlow's default level, as on Vertex, where every stderr line is an error: no
    harmless TensorFlow start-up lines."""
    # One pass, the partial last batch included (as Keras counts steps): 63 steps.
    steps = -(-EXAMPLES // BATCH)
    stop = steps + steps // 2  # timed saves come after every step on one task
    # Only the stopped run needs the timed saves; the others save at epoch ends (TINY), which
    # leaves their weights alone and spares a save per step.
    timed_saves = "--checkpoint-minutes=0.000001"
    whole, job = tmp_path / "whole", tmp_path / "job"
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # unset, as on Vertex
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]
    [log] = run_replicas(PROJECT, tmp_path, [*ARGS, f"--job-dir={whole}"], "whole", 1, env=env)
    assert "SavedModel written" in log  # our own log lines are there
    assert [line for line in log.splitlines() if any(text in line for text in NOISE)] == []
    stopped = [*ARGS, timed_saves, f"--job-dir={job}"]
    hooks = sitecustomize(SITECUSTOMIZE, STOP_AFTER_STEP=str(stop))
    run_tasks(tmp_path, stopped, "stopped", replicas=1, exit_code=137, **hooks)
    # The newest two saves are kept. As if the run had died while copying the second (no
    # marker), beside a newer folder with only part of its files: the rerun skips both.
    root = job / "checkpoints"
    assert [c.step for c in checkpoints.list_checkpoints(str(root))] == [stop - 1, stop]
    (root / f"checkpoint-{stop}" / checkpoints.MARKER).unlink()
    shutil.copytree(root / f"checkpoint-{stop - 1}", root / "checkpoint-999")
    (root / "checkpoint-999" / checkpoints.MARKER).unlink()
    next((root / "checkpoint-999").glob("ckpt.data-*")).write_bytes(b"trunc")
    logs = run_tasks(tmp_path, [*ARGS, f"--job-dir={job}"], "resumed", replicas=1)

    expected = _final_weights(whole / "checkpoints")
    weights = _final_weights(job / "checkpoints")
    assert weights.keys() == expected.keys() and weights
    largest = max(float(np.abs(weights[k] - expected[k]).max()) for k in weights)
    assert largest == 0.0, f"max |dW| {largest:.3g}"
    assert f"{steps} steps per epoch" in logs[0]
    for skipped in (f"checkpoint-{stop}:", "checkpoint-999:"):
        assert any("Skipping" in line and skipped in line for line in logs[0].splitlines())
    resumed = stop - 1
    assert f"(step {resumed}, 1 epochs done) and {resumed - steps} steps of epoch 2" in logs[0]
    assert f"Finishing epoch 2: {2 * steps - resumed} of its {steps} steps remain" in logs[0]
    assert reported_epochs(tmp_path / "resumed-0.metrics") == [2]
    latest = checkpoints.latest_complete(str(root))  # the steps of a run never stopped
    assert (latest.step, latest.metadata()["epochs_done"]) == (EPOCHS * steps, EPOCHS)
