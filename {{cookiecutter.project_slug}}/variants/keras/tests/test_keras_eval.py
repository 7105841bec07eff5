"""The tuning metric is the exported model's accuracy on the distinct eval images.

Ground truth: the test decodes the eval PNGs itself, runs the exported SavedModel on them and
counts correct answers. Whatever the batch size and number of workers, and also when a rerun
finds every epoch done, the last value reported to hyperparameter tuning (and logged to
TensorBoard) must equal it: every eval image counted once, none repeated to fill a batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, run_tasks, train
from vertex_trainer_tools.testing import read_metrics

from trainer.metric import METRIC

CLASSES = ("amber", "blue", "cyan")
SIZE = 16
EVAL_IMAGES = 51  # odd, and no batch size used here divides it


def write_images(root: Path, count: int, seed: int, mislabel_every: int = 0) -> None:
    """``count`` PNGs of SIZE x SIZE, each class its own colour under noise; every
    ``mislabel_every``-th image is filed under the next class, so no model scores 100%."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        colour = i % len(CLASSES)
        pixels = 0.4 * rng.uniform(0, 255, (SIZE, SIZE, 3))
        pixels[..., colour] += 150
        label = (
            (colour + 1) % len(CLASSES) if mislabel_every and i % mislabel_every == 0 else colour
        )
        folder = root / CLASSES[label]
        folder.mkdir(parents=True, exist_ok=True)
        encoded = tf.io.encode_png(pixels.astype(np.uint8)).numpy()
        (folder / f"img{i:03d}.png").write_bytes(encoded)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    write_images(root / "train", 60, seed=1)
    write_images(root / "eval", EVAL_IMAGES, seed=2, mislabel_every=4)
    return root / "train", root / "eval"


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
                if value.tag == f"epoch_{METRIC}":
                    values.append(float(tf.make_ndarray(value.tensor)))
    return values


def train_args(folders, job: Path, batch_size: int) -> list[str]:
    train_root, eval_root = folders
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
    reported = float(read_metrics(metrics_file)[-1][METRIC])
    assert reported == pytest.approx(truth, abs=1e-6), f"{EVAL_IMAGES} images: {truth}"
    assert tensorboard_eval_accuracy(job / "logs")[-1] == pytest.approx(truth, abs=1e-6)
    return truth


@pytest.mark.parametrize("batch_size", [8, pytest.param(32, marks=pytest.mark.slow)])
def test_reported_accuracy_counts_each_eval_image_once(tmp_path, folders, metrics_file, batch_size):
    """51 images at a batch of 8 or 32: no padded or repeated images in the measurement. At 32
    (make test-all; the fast tier keeps one resume, test_keras_resume.py), a rerun that finds
    every epoch done (on a fresh VM, say) still reports, last, the accuracy of the model it
    exports."""
    job = tmp_path / "job"
    assert train(train_args(folders, job, batch_size)) == 0
    assert_reports_exported_accuracy(metrics_file, job, folders[1])
    if batch_size == 32:
        metrics_file.unlink()
        assert train(train_args(folders, job, 32)) == 0
        assert [line["global_step"] for line in read_metrics(metrics_file)] == ["1"]
        truth = exported_accuracy(job / "model", folders[1])
        assert float(read_metrics(metrics_file)[-1][METRIC]) == pytest.approx(truth, abs=1e-6)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_workers_count_each_eval_image_once(tmp_path, folders):
    """Chief + worker, 25 images per replica (split across two workers, 51 eval images would
    need a padded or empty batch): the chief reports the exported model's accuracy on the 51
    distinct images."""
    job = tmp_path / "job"
    argv = [*train_args(folders, job, 25), "--steps-per-epoch=5"]
    chief, _ = run_tasks(tmp_path, argv, "eval")
    assert "2 replica(s), global batch 50" in chief
    assert_reports_exported_accuracy(tmp_path / "eval-0.metrics", job, folders[1])
