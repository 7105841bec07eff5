"""--precision, --jit-compile and the throughput logs of a run, proven on CPU (the GPU side of
--precision is in test_keras_gpu.py; the policy rule and the throughput arithmetic are the
runtime's, vertex_trainer_runtime.keras, tested in vertex-trainer-runtime)."""

from __future__ import annotations

import logging

import pytest
import tensorflow as tf
import tf_keras as keras
from conftest import TINY, train
from vertex_trainer_runtime import checkpoints


@pytest.fixture
def policy_reset():
    """The policy is process-wide: leave float32 behind for the next test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_precisions_resume_xla_trains_and_throughput_is_logged(
    tmp_path, caplog, capsys, policy_reset
):
    """auto is float32 on CPU; its checkpoint resumes under mixed_bfloat16 with XLA at the step
    it was taken, not under mixed_float16 (no loss scale saved); the export serves float32; the
    throughput reaches the log, TensorBoard and the epoch's logs."""
    caplog.set_level(logging.INFO)
    job = f"--job-dir={tmp_path / 'job'}"
    assert train([*TINY, "--epochs=1", job]) == 0
    assert "Precision float32 (--precision=auto, CPU)" in caplog.text
    first = checkpoints.latest_complete(str(tmp_path / "job" / "checkpoints"))
    assert first.step == 4 and first.metadata()["precision"] == "float32"

    assert train([*TINY, "--epochs=2", "--precision=mixed_float16", job]) == 2
    error = capsys.readouterr().err
    assert "ERROR: --precision mixed_float16: checkpoint " in error
    assert "resume with --precision=float32, or use a new --checkpoint-dir" in error

    caplog.clear()
    argv = [*TINY, "--epochs=2", "--precision=mixed_bfloat16", "--jit-compile", "--logging-steps=1"]
    assert train([*argv, job]) == 0
    assert "Checkpoint saved with precision float32, resuming with mixed_bfloat16" in caplog.text
    assert f"Resumed from {first.path} (step 4, 1 epochs done)" in caplog.text
    assert "XLA: the training step is compiled (--jit-compile)" in caplog.text
    second = checkpoints.latest_complete(str(tmp_path / "job" / "checkpoints"))
    assert second.step == 8 and second.metadata()["precision"] == "mixed_bfloat16"
    served = tf.saved_model.load(str(tmp_path / "job" / "model")).signatures["serving_default"]
    assert served.structured_outputs["probabilities"].dtype == tf.float32

    # Step 5 traces (and compiles) the step: left out; then one report per step.
    steps = [r.getMessage() for r in caplog.records if "examples/s, " in r.getMessage()]
    assert [line.split(":")[0] for line in steps] == ["Step 6", "Step 7", "Step 8"], steps
    assert "s in checkpoints, " in caplog.text and "s in evaluation" in caplog.text
    seen = {}  # tag -> steps, over both runs' event files
    for events in (tmp_path / "job" / "logs" / "throughput").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                seen.setdefault(value.tag, []).append(event.step)
    # The first run: steps 2-4 in one report at the epoch's end (--logging-steps=50).
    assert sorted(seen["examples_per_second"]) == sorted(seen["step_time_seconds"]) == [4, 6, 7, 8]
    assert set(seen) >= {"total_checkpoint_seconds", "total_evaluation_seconds"}
    assert "examples_per_second: " in capsys.readouterr().out  # the epoch's logs (Keras's line)
