"""Image folders (real PNG files) and TFDS datasets are read, sharded across workers and trained
on."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import CLASSES, PROJECT, TINY, reported_epochs, run_tasks
from vertex_trainer_runtime.keras import passes, sources

from trainer import data, tfds_data


def test_split_and_shards(image_folders):
    """--validation-split holds out a quarter; shards by file. (A run: test_keras_eval.py.)"""
    train_source, eval_source = data.image_folders(str(image_folders[0]), None, 16, 0.25, seed=1)
    assert train_source.class_names == CLASSES
    assert (train_source.size, eval_source.size) == (45, 15)

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
    batches = list(sources.eval_dataset(eval_source, 4))
    assert [int(labels.shape[0]) for _, labels in batches] == [4, 4, 4, 3]
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
    """A TFDS builder prepared offline (non-square images), a slice of its training split held
    out. Chief and worker share one TFDS data folder: the chief prepares the dataset while the
    worker waits, then each reads its own examples of the one file."""
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
