"""The Keras trainer really trains, exports a servable SavedModel and reports to Vertex HPT; one
TensorFlow version everywhere: the image's base, requirements.txt and this environment."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
import yaml
from conftest import PROJECT, TINY, subprocess_env, train
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.keras import run
from vertex_trainer_tools.testing import read_metrics

from trainer import model as models
from trainer.flags import Model
from trainer.train import export as export_model

SMALL_CNN = Model(model="small-cnn", weights="none")


def checkpoint_learning_rate(checkpoint) -> float:
    """The optimizer's learning rate as saved in a checkpoint's files."""
    prefix = f"{checkpoint.path}/ckpt"
    names = [name for name, _ in tf.train.list_variables(prefix)]
    [name] = [n for n in names if n.startswith("optimizer/") and "learning_rate" in n]
    return float(tf.train.load_checkpoint(prefix).get_tensor(name))


@pytest.fixture
def policy_reset():
    """The policy is process-wide: leave float32 behind for the next test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_trains_exports_reports_and_resumes_in_another_precision_with_xla(
    tmp_path, metrics_file, experiment_run, monkeypatch, serve_model, caplog, capsys, policy_reset
):
    """A run learns, reports and exports a servable model; then --precision, --jit-compile, a
    new --learning-rate and the throughput logs, proven on CPU (the GPU side of --precision:
    test_keras_gpu.py; the policy rule and the throughput arithmetic: the runtime's tests). auto
    is float32 on CPU; its checkpoint resumes under mixed_bfloat16 with XLA at the step it was
    taken, not under mixed_float16 (no loss scale saved) nor into another model; the export
    serves float32; the throughput reaches the log, TensorBoard and the epoch's logs."""
    for name, value in experiment_run.env.items():  # as for a job with job.experiment
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.INFO)
    job = tmp_path / "job"
    argv = [*TINY, "--synthetic-examples=256", "--learning-rate=0.01", f"--job-dir={job}"]
    assert train([*argv, "--epochs=2"]) == 0
    assert "Precision float32 (--precision=auto, CPU)" in caplog.text

    # One hypertune line per epoch, global_step = epoch, the tag vertex.yaml's study uses.
    lines = read_metrics(metrics_file)
    assert [line["global_step"] for line in lines] == ["1", "2"]
    accuracy = [float(line["accuracy"]) for line in lines]
    assert all(0.0 <= value <= 1.0 for value in accuracy)
    assert accuracy[-1] >= 0.75, f"4 separable classes, chance is 0.25: {accuracy}"
    # The Experiment run: the flags, each epoch's evaluation, the exported model's accuracy.
    logged = experiment_run.logged()
    assert logged["_params"]["learning_rate"] == 0.01 and logged["_state"] == "COMPLETE"
    evaluations = experiment_run.evaluations()
    assert [e["step"] for e in evaluations] == [1, 2] and set(evaluations[0]) >= {"loss"}
    assert [e["accuracy"] for e in evaluations] == pytest.approx(accuracy)
    assert logged["_metrics"]["final_accuracy"] == pytest.approx(accuracy[-1])
    # Each epoch's speed with its evaluation; where the rest of the time went, at the end.
    assert all(e["examples_per_second"] > 0 < e["step_time_seconds"] for e in evaluations)
    assert logged["_metrics"]["final_checkpoint_seconds"] > 0
    assert logged["_metrics"]["final_evaluation_seconds"] > 0

    # The SavedModel, without the trainer's code, answers a Vertex request (serving_default).
    images = np.random.default_rng(0).uniform(0, 255, (3, 16, 16, 3)).tolist()
    rows = serve_model(job / "model", images)["predictions"]
    assert [len(row["probabilities"]) for row in rows] == [4] * 3
    assert [sum(row["probabilities"]) for row in rows] == pytest.approx([1.0] * 3, rel=1e-5)
    assert all(row["class_name"] == f"class_{row['class_index']}" for row in rows)

    # Epoch checkpoints with the complete marker; TensorBoard event files.
    latest = checkpoints.latest_complete(str(job / "checkpoints"))
    assert latest is not None and latest.metadata()["epochs_done"] == 2
    assert latest.step == 2 * 256 // 16 and latest.metadata()["precision"] == "float32"
    assert list((job / "logs").rglob("events.out.tfevents.*"))

    # Reruns that add a third epoch (not in the Experiment).
    for name in experiment_run.env:
        monkeypatch.delenv(name)
    assert train([*argv, "--epochs=3", "--precision=mixed_float16"]) == 2
    error = capsys.readouterr().err
    assert "ERROR: --precision mixed_float16: checkpoint " in error
    assert "resume with --precision=float32, or use a new --checkpoint-dir" in error
    # A checkpoint of another architecture is reported, never silently mixed in.
    assert train([*argv, "--epochs=3", "--synthetic-classes=3"]) == 2
    assert "does not fit this model" in capsys.readouterr().err

    caplog.clear()
    xla = ["--epochs=3", "--precision=mixed_bfloat16", "--jit-compile", "--logging-steps=1"]
    assert train([*argv, *xla, "--learning-rate=0.05"]) == 0
    assert "Checkpoint saved with precision float32, resuming with mixed_bfloat16" in caplog.text
    assert f"Resumed from {latest.path} (step 32, 2 epochs done)" in caplog.text
    assert "XLA: the training step is compiled (--jit-compile)" in caplog.text
    second = checkpoints.latest_complete(str(job / "checkpoints"))
    assert second.step == 48 and second.metadata()["precision"] == "mixed_bfloat16"
    # It trains at its own --learning-rate, not the checkpoint's.
    assert checkpoint_learning_rate(latest) == pytest.approx(0.01)
    assert checkpoint_learning_rate(second) == pytest.approx(0.05)
    served = tf.saved_model.load(str(job / "model")).signatures["serving_default"]
    assert served.structured_outputs["probabilities"].dtype == tf.float32

    # Step 33 traces (and compiles) the step: left out; then one report per step.
    steps = [r.getMessage() for r in caplog.records if "examples/s, " in r.getMessage()]
    expected = [f"Step {step}" for step in range(34, 49)]
    assert [line.split(":")[0] for line in steps] == expected, steps
    assert "s in checkpoints, " in caplog.text and "s in evaluation" in caplog.text
    # TensorBoard gets them (at which steps: the runtime's test_keras_throughput.py).
    assert list((job / "logs" / "throughput").glob("events.out.tfevents.*"))
    assert "examples_per_second: " in capsys.readouterr().out  # the epoch's logs (Keras's line)


def test_metric_name_needs_no_tensorflow():
    """Config checks read the metric from trainer/spec.py without importing TensorFlow; it is
    the metric id of vertex.yaml's study."""
    code = (
        "import sys; from trainer.spec import SPEC; print(SPEC.metric, 'tensorflow' in sys.modules)"
    )
    command = [sys.executable, "-c", code]
    printed = subprocess.check_output(command, cwd=PROJECT, env=subprocess_env(), text=True)
    study = yaml.safe_load((PROJECT / "vertex.yaml").read_text())["hpt"]["metric"]["id"]
    assert printed.split() == [study, "False"]


def test_savedmodel_answers_vertex_requests_as_the_keras_model(
    tmp_path, serve_model, monkeypatch, caplog
):
    """TF Serving's row format (one object of every output per instance), as the prebuilt TF
    prediction image serves it, with what the Keras model predicts. A worker exports too (a
    collective under MultiWorkerMirroredStrategy), into a scratch folder it then removes."""
    classes = ("circle", "square", "triangle")
    classifier = models.build(SMALL_CNN, len(classes), 16, 0.01)
    images = np.random.default_rng(0).uniform(0, 255, (4, 16, 16, 3)).astype(np.float32)
    classifier.fit(images, np.arange(4) % len(classes), epochs=1, verbose=0)
    models.export(classifier, classes, 16, str(tmp_path / "model"))
    rows = serve_model(tmp_path / "model", images.tolist())["predictions"]
    expected = classifier(images, training=False).numpy()
    assert [set(row) for row in rows] == [{"probabilities", "class_index", "class_name"}] * 4
    served = [row["probabilities"] for row in rows]
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    assert [row["class_name"] for row in rows] == [classes[i] for i in expected.argmax(1)]

    scratch = tmp_path / "worker-tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    caplog.set_level(logging.INFO)
    worker = SimpleNamespace(is_chief=False, task_type="worker", index=0)
    source = SimpleNamespace(class_names=classes)
    run.export_on_every_task(export_model, classifier, source, str(tmp_path / "no-model"), worker)
    assert f"copy of the model to {scratch}/keras-worker-0-model-" in caplog.text
    assert list(scratch.iterdir()) == [] and not (tmp_path / "no-model").exists()


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_tensorflow_version_agrees():
    requirements = (PROJECT / "requirements.txt").read_text()
    pinned = re.search(r"^tensorflow==(\d+\.\d+)\.\*$", requirements, re.M).group(1)
    assert re.search(rf"^tf-keras=={re.escape(pinned)}\.\*$", requirements, re.M)

    dockerfile = (PROJECT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile, re.M).group(1)
    if base.startswith(("nvidia/cuda:", "python:")):  # the Dockerfile pip-installs it
        installed = re.search(r'"tensorflow(?:\[and-cuda\])?==(\d+\.\d+)\.\*"', dockerfile).group(1)
    else:
        match = re.search(r"/tf2-(?:cpu|gpu)\.(\d+)-(\d+)\.py\d+", base)
        installed = f"{match.group(1)}.{match.group(2)}"
    assert installed == pinned

    assert minor(tf.__version__) == pinned
    assert minor(keras.__version__) == pinned  # tf-keras
