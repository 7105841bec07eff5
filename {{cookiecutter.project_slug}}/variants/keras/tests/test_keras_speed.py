"""--precision, --jit-compile and the throughput logs, proven on CPU (the GPU side of --precision
is in test_keras_gpu.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from conftest import TINY, train
from vertex_trainer_runtime import checkpoints

from trainer import model as models
from trainer import precision, throughput
from trainer.flags import Model

SMALL_CNN = Model(model="small-cnn", weights="none")


@pytest.mark.parametrize(
    ("kind", "capability", "expected"),
    [
        ("cpu", None, "float32"),
        ("gpu", (9, 0), "mixed_bfloat16"),  # H100, H200
        ("gpu", (8, 9), "mixed_bfloat16"),  # L4
        ("gpu", (8, 0), "mixed_bfloat16"),  # A100
        ("gpu", (7, 5), "mixed_float16"),  # T4
        ("gpu", (7, 0), "mixed_float16"),  # V100
        ("gpu", (6, 0), "float32"),  # P100: no tensor cores
        ("gpu", (3, 7), "float32"),  # K80
        ("gpu", None, "float32"),  # capability unknown
    ],
)
def test_auto_precision_follows_the_compute_capability(kind, capability, expected):
    assert precision.choose(kind, capability) == expected


@pytest.fixture
def policy_reset():
    """The policy is process-wide: leave float32 behind for the next test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_mixed_bfloat16_computes_in_bfloat16_on_float32_variables(policy_reset):
    assert precision.apply("mixed_bfloat16") == "mixed_bfloat16"
    classifier = models.build(SMALL_CNN, 4, 16, 0.01)
    images = np.random.default_rng(0).uniform(0, 255, (32, 16, 16, 3)).astype(np.float32)
    history = classifier.fit(images, np.arange(32) % 4, batch_size=16, epochs=1, verbose=0)

    assert int(classifier.optimizer.iterations.numpy()) == 2
    assert np.isfinite(history.history["loss"][-1])
    convolutions = [layer for layer in classifier.layers if isinstance(layer, keras.layers.Conv2D)]
    probe = keras.Model(classifier.input, [layer.output for layer in convolutions])
    assert [output.dtype for output in probe(images[:2])] == [tf.bfloat16] * 2
    assert classifier(images[:2]).dtype == tf.float32  # the output layer computes in float32
    assert {variable.dtype for variable in classifier.variables} == {tf.float32}


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


def test_a_mixed_float16_checkpoint_restores_under_float32(tmp_path, policy_reset):
    """The saved loss scale is left unread; weights and the optimizer's step come back."""
    precision.apply("mixed_float16")
    source = models.build(SMALL_CNN, 4, 16, 0.01)
    # tf-keras's compile adds loss scaling to mixed_float16 by itself.
    assert isinstance(source.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert source.optimizer.dynamic
    source.optimizer.iterations.assign(7)
    tf.train.Checkpoint(model=source, optimizer=source.optimizer).write(str(tmp_path / "ckpt"))

    precision.apply("float32")
    target = models.build(SMALL_CNN, 4, 16, 0.01)
    restored = tf.train.Checkpoint(model=target, optimizer=target.optimizer)
    restored.read(str(tmp_path / "ckpt")).assert_existing_objects_matched()
    assert int(target.optimizer.iterations.numpy()) == 7
    for saved, loaded in zip(source.get_weights(), target.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, loaded)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throughput_leaves_out_the_first_step_checkpoints_and_evaluation():
    clock = Clock()
    timings = throughput.Timings(clock)
    speed = throughput.Throughput(global_batch=32, every_steps=2, timings=timings)
    speed.set_model(SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(10))))

    def step(seconds: float) -> None:
        clock.now += seconds
        speed.on_train_batch_end(0)

    speed.on_train_begin()
    speed.on_epoch_begin(0)
    step(5.0)  # tracing: left out
    step(0.1)
    step(0.1)  # step 13: the first report
    with timings.measure(throughput.CHECKPOINT):
        clock.now += 1.0
    with timings.measure(throughput.EVALUATION):
        clock.now += 2.0
    step(0.1)
    step(0.1)  # step 15: 0.2 s of steps, 3 s of checkpoint and evaluation
    step(0.1)
    logs = {}
    speed.on_epoch_end(0, logs)  # step 16: the rest of the epoch

    assert speed.step == 16
    assert [report["step_time_seconds"] for report in speed.reports] == pytest.approx([0.1] * 3)
    assert [report["examples_per_second"] for report in speed.reports] == pytest.approx([320] * 3)
    assert logs == pytest.approx({"examples_per_second": 320.0, "step_time_seconds": 0.1})
    assert speed.summary() == pytest.approx(
        {
            "training_seconds": 5.5,
            "checkpoint_seconds": 1.0,
            "evaluation_seconds": 2.0,
            "examples_per_second": 320.0,
        }
    )
