"""The tuning metric is the exported model's accuracy on the distinct eval images: the test
decodes the eval PNGs itself and runs the exported SavedModel on them. Whatever the batch size
and number of workers, and when a rerun finds every epoch done, the last value reported to
hyperparameter tuning (and TensorBoard) must equal it: each image once, none repeated."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import CLASSES, EVAL_IMAGES, SIZE, TINY, reported_epochs, run_tasks, train
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.testing import read_metrics

from trainer import data
from trainer.spec import SPEC


def exported_accuracy(model_dir: Path, eval_root: Path) -> float:
    """The SavedModel's accuracy on every eval image once, decoded here, not by the trainer."""
    images, labels = [], []
    for label, name in enumerate(CLASSES):
        for path in sorted((eval_root / name).glob("*.png")):
            images.append(tf.io.decode_png(path.read_bytes(), channels=3).numpy())
            labels.append(label)
    assert len(images) == EVAL_IMAGES
    loaded = tf.saved_model.load(str(model_dir))
    outputs = loaded.signatures["serving_default"](images=tf.constant(images, tf.float32))
    return float(np.mean(outputs["class_index"].numpy() == np.array(labels)))


def tensorboard_eval_accuracy(log_dir: Path) -> list[float]:
    """The per-epoch eval accuracy Keras wrote to TensorBoard's validation run."""
    values = []
    for path in sorted((log_dir / "validation").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == f"epoch_{SPEC.metric}":
                    values.append(float(tf.make_ndarray(value.tensor)))
    return values


def train_args(image_folders, job: Path, batch_size: int) -> list[str]:
    train_root, eval_root = image_folders
    return [
        *TINY,
        f"--train-data={train_root}",
        f"--eval-data={eval_root}",
        f"--image-size={SIZE}",
        f"--batch-size={batch_size}",
        "--epochs=1",
        "--learning-rate=0.01",
        f"--job-dir={job}",
    ]


def assert_reports_exported_accuracy(metrics_file: Path, job: Path, eval_root: Path) -> float:
    truth = exported_accuracy(job / "model", eval_root)
    reported = float(read_metrics(metrics_file)[-1][SPEC.metric])
    assert reported == pytest.approx(truth, abs=1e-6), f"{EVAL_IMAGES} images: {truth}"
    assert tensorboard_eval_accuracy(job / "logs")[-1] == pytest.approx(truth, abs=1e-6)
    return truth


def test_a_vertex_trial_reports_the_accuracy_of_each_eval_image_once_and_serves_files(
    tmp_path, image_folders, metrics_file, monkeypatch, caplog
):
    """As Vertex runs a tuning trial: AIP_* dirs with trailing slashes, the trial's CLUSTER_SPEC
    and HPT-style flags (underscores, DISCRETE values as floats, a flag the trainer lacks). 51
    eval images at a batch of 8: no padded or repeated images in the measurement."""
    base = tmp_path / "base" / "3"
    monkeypatch.setenv("AIP_MODEL_DIR", f"{base}/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{base}/checkpoints/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", f"{base}/logs/")
    trial = {"type": "workerpool0", "index": 0, "trial": "3"}
    cluster = {"workerpool0": ["cmle-training-workerpool0-ab12cd34ef-0:2222"]}
    job = json.dumps({"python_module": "", "job_args": []})
    spec = {"cluster": cluster, "environment": "cloud", "task": trial, "job": job}
    monkeypatch.setenv("CLUSTER_SPEC", json.dumps(spec))
    caplog.set_level(logging.WARNING)
    train_root, eval_root = image_folders
    argv = [*TINY, f"--train-data={train_root}/", f"--eval-data={eval_root}", "--batch_size=8.0"]
    argv += ["--epochs=2.0", "--learning_rate=0.01", "--some_injected_flag=1"]
    assert train(argv) == 0
    assert "--some-injected-flag=1" in caplog.text
    assert reported_epochs(metrics_file) == [1, 2]
    # 60 training images in batches of 8: 8 steps an epoch, the float taken as 8.
    assert [c.step for c in checkpoints.list_checkpoints(str(base / "checkpoints"))] == [8, 16]
    assert_reports_exported_accuracy(metrics_file, base, eval_root)
    loaded = tf.saved_model.load(str(base / "model"))
    outputs = loaded.signatures["serving_default"](images=tf.fill([2, SIZE, SIZE, 3], 100.0))
    assert outputs["probabilities"].shape == (2, 3)
    assert {name.decode() for name in outputs["class_name"].numpy()} <= set(CLASSES)

    # serving_bytes takes the files themselves, decoded and resized as in training.
    files = [train_root / "cyan" / "img002.png", train_root / "amber" / "img000.JPG"]
    raw = tf.constant([path.read_bytes() for path in files])
    from_bytes = loaded.signatures["serving_bytes"](image_bytes=raw)
    decoded = tf.stack([data.decode_image(tf.io.read_file(str(path)), SIZE) for path in files])
    from_pixels = loaded.signatures["serving_default"](images=decoded)
    np.testing.assert_allclose(
        from_bytes["probabilities"].numpy(), from_pixels["probabilities"].numpy(), rtol=1e-5
    )
    assert from_bytes["class_name"].shape == (2,)


@pytest.mark.slow  # make test-all; the fast tier keeps one resume (test_keras_resume.py)
def test_reported_accuracy_counts_each_eval_image_once(tmp_path, image_folders, metrics_file):
    """51 images at a batch of 32; a rerun that finds every epoch done (on a fresh VM, say)
    still reports, last, the accuracy of the model it exports."""
    job = tmp_path / "job"
    assert train(train_args(image_folders, job, 32)) == 0
    assert_reports_exported_accuracy(metrics_file, job, image_folders[1])
    metrics_file.unlink()
    assert train(train_args(image_folders, job, 32)) == 0
    assert [line["global_step"] for line in read_metrics(metrics_file)] == ["1"]
    truth = exported_accuracy(job / "model", image_folders[1])
    assert float(read_metrics(metrics_file)[-1][SPEC.metric]) == pytest.approx(truth, abs=1e-6)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_workers_count_each_eval_image_once(tmp_path, image_folders):
    """Chief + worker, 25 images per replica (split across two workers, 51 eval images would
    need a padded or empty batch): the chief reports the exported model's accuracy on all 51."""
    job = tmp_path / "job"
    argv = [*train_args(image_folders, job, 25), "--steps-per-epoch=5"]
    chief, _ = run_tasks(tmp_path, argv, "eval")
    assert "2 replica(s), global batch 50" in chief
    assert_reports_exported_accuracy(tmp_path / "eval-0.metrics", job, image_folders[1])
