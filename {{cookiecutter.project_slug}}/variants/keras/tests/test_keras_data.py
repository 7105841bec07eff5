"""Image folders (real PNG files) and TFDS datasets are read, sharded across workers and trained
on."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import PROJECT, TINY, reported_epochs, run_tasks, train
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.keras import passes

from trainer import data, tfds_data

CLASSES = ("cats", "dogs", "zebras")


@pytest.fixture
def image_folder(tmp_path):
    """Three class folders of small PNGs (one JPEG), each class its own colour."""
    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for k, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(8):
            pixels = np.full((20, 24, 3), 40, np.uint8)
            pixels[..., k] = 220
            pixels = np.clip(pixels + rng.integers(0, 30, pixels.shape), 0, 255).astype(np.uint8)
            if i == 0:
                encoded = tf.io.encode_jpeg(pixels).numpy()
                (root / name / f"img{i}.JPG").write_bytes(encoded)
            else:
                (root / name / f"img{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
        (root / name / "README.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    return root


def test_trains_on_an_image_folder_as_a_vertex_trial(
    tmp_path, image_folder, metrics_file, monkeypatch, caplog
):
    """As Vertex runs a tuning trial: AIP_* dirs with trailing slashes, the trial's CLUSTER_SPEC
    and HPT-style flags (underscores, DISCRETE values as floats, a flag the trainer lacks)."""
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
    argv = [
        *TINY,
        f"--train-data={image_folder}/",
        "--eval-data=",
        "--validation-split=0.25",
        "--batch_size=4.0",
        "--epochs=2.0",
        "--learning_rate=0.01",
        "--some_injected_flag=1",
    ]
    assert train(argv) == 0
    assert "--some-injected-flag=1" in caplog.text
    assert reported_epochs(metrics_file) == [1, 2]
    # 18 training images (6 held out) in batches of 4: 5 steps an epoch, the float taken as 4.
    assert [c.step for c in checkpoints.list_checkpoints(str(base / "checkpoints"))] == [5, 10]
    assert list((base / "logs").rglob("events.out.tfevents.*"))
    loaded = tf.saved_model.load(str(base / "model"))
    outputs = loaded.signatures["serving_default"](images=tf.fill([2, 16, 16, 3], 100.0))
    assert outputs["probabilities"].shape == (2, 3)
    assert {name.decode() for name in outputs["class_name"].numpy()} <= set(CLASSES)

    # serving_bytes takes the files themselves, decoded and resized as in training.
    files = [image_folder / "zebras" / "img1.png", image_folder / "cats" / "img0.JPG"]
    raw = tf.constant([path.read_bytes() for path in files])
    from_bytes = loaded.signatures["serving_bytes"](image_bytes=raw)
    decoded = tf.stack([data.decode_image(tf.io.read_file(str(path)), 16) for path in files])
    from_pixels = loaded.signatures["serving_default"](images=decoded)
    np.testing.assert_allclose(
        from_bytes["probabilities"].numpy(), from_pixels["probabilities"].numpy(), rtol=1e-5
    )
    assert from_bytes["class_name"].shape == (2,)


def test_split_and_shards(image_folder):
    train_source, eval_source = data.image_folders(str(image_folder), None, 16, 0.25, seed=1)
    assert train_source.class_names == CLASSES
    assert (train_source.size, eval_source.size) == (18, 6)

    def keys(source, pipelines, index):
        context = tf.distribute.InputContext(pipelines, index, pipelines)
        return [path.decode() for path, _ in source.shard(context).as_numpy_iterator()]

    # Each worker reads only its own files; together they read every file once.
    shards = [keys(train_source, 2, index) for index in range(2)]
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == sorted(keys(train_source, 1, 0))
    assert not set(keys(eval_source, 1, 0)) & set(keys(train_source, 1, 0))

    # The eval dataset holds every eval image exactly once, the last batch partial.
    everything = tf.distribute.InputContext(1, 0, 1)
    truth = sorted(
        (int(label), float(tf.reduce_sum(data.decode_image(tf.io.read_file(path), 16))))
        for path, label in eval_source.shard(everything).as_numpy_iterator()
    )
    batches = list(data.eval_dataset(eval_source, 4))
    assert [int(labels.shape[0]) for _, labels in batches] == [4, 2]
    seen = sorted(
        (int(label), float(tf.reduce_sum(image)))
        for images, labels in batches
        for image, label in zip(images, labels, strict=True)
    )
    np.testing.assert_allclose(seen, truth, rtol=1e-6)


# The trainer with the test's TFDS builder registered first (as a user's own builder module).
WITH_TFDS_BUILDER = (
    "import runpy, tfds_numbered; runpy.run_module('trainer.task', run_name='__main__')"
)


@pytest.mark.distributed  # make test-all: the fast tier keeps one run per data source
def test_trains_on_a_tfds_dataset_prepared_once_by_the_chief(tmp_path):
    """A TFDS builder prepared offline (non-square images): no validation split, so a slice of
    the training split is held out. Chief and worker share one TFDS data folder: the chief
    prepares the dataset while the worker waits, then each reads its own examples of the one
    file."""
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


def numbers(dataset) -> list[int]:
    """The example numbers (pixel values) a (image, label) dataset yields."""
    return [int(image[0, 0, 0]) for image, _ in dataset.as_numpy_iterator()]


def test_tfds_shards_by_example_when_files_are_fewer_than_workers(tmp_path):
    """40 examples in one file, two workers: TFDS cannot give each a file, so each worker
    reads its own half of the examples, and the eval slice is split exactly. Training on two
    workers, each pass takes every example once, and a restart continues the same order."""
    tfds = pytest.importorskip("tensorflow_datasets")
    import tfds_numbered

    data_dir = str(tmp_path / "tfds")
    train_source, eval_source = tfds_data.tfds_sources(
        f"tfds:{tfds_numbered.NAME}", None, 4, 0.25, data_dir
    )
    assert (train_source.size, eval_source.size) == (30, 10)
    assert train_source.class_names == eval_source.class_names == ("even", "odd")
    builder = tfds.builder(tfds_numbered.NAME, data_dir=data_dir)
    assert len(builder.info.splits["train"].file_instructions) == 1
    whole = {}
    for source, split in ((train_source, "train[:75%]"), (eval_source, "train[75%:]")):
        whole[split] = numbers(builder.as_dataset(split=split, as_supervised=True))
        shards = [
            numbers(source.shard(tf.distribute.InputContext(2, index, 2))) for index in range(2)
        ]
        assert all(shards), "a worker got no examples"
        assert sorted(shards[0] + shards[1]) == sorted(whole[split])
    assert sorted(whole["train[:75%]"] + whole["train[75%:]"]) == list(range(40))

    # The passes (vertex_trainer_runtime.keras.passes) over this source, by example number.
    source = dataclasses.replace(train_source, load=lambda image, label: (image[0, 0, 0], label))
    steps = passes.steps_per_pass(source.size, 8, 2)
    stream = passes.worker_batches(source, 2, 4, 0, 2 * steps)
    for number in range(2):
        one_pass = stream[number * steps : (number + 1) * steps]
        seen = sorted(int(i) for step in one_pass for batch in step for i in batch)
        assert seen == sorted(whole["train[:75%]"]) and len(set(seen)) == source.size == 30
    assert passes.worker_batches(source, 2, 4, steps + 1, steps - 1) == stream[steps + 1 :]
