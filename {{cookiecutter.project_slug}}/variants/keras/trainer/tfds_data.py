"""TensorFlow Datasets sources: ``--train-data``/``--eval-data`` ``tfds:<name>[:<split>]``.

YOURS TO CHANGE: which features of a TFDS dataset are the image and the label (a dataset that
names them otherwise), which split evaluates, how an image is resized.

The chief prepares a dataset once (the others wait), each worker reads its part of a split with
``tfds.even_splits``; ``tensorflow_datasets`` is imported only when used.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf
from vertex_trainer_runtime import cli
from vertex_trainer_runtime.keras.sources import Source, run_here

TFDS_PREFIX = "tfds:"
# Decoded records, not small keys (sources.SHUFFLE_BUFFER): TFDS also shuffles its files.
TFDS_SHUFFLE_BUFFER = 1_000


def _tfds_builder(spec: str, flag: str, data_dir: str | None, chief_first: Callable = run_here):
    """The prepared builder and the split of ``tfds:<name>[:<split>]`` (or None); ``chief_first``
    prepares on the chief while the others wait, so no two download into one ``data_dir``."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise cli.InputError(f"{flag} {spec}: needs 'pip install tensorflow-datasets'") from None
    name, _, split = spec[len(TFDS_PREFIX) :].partition(":")
    if not name:
        raise cli.InputError(f"{flag} {spec}: expected tfds:<name> or tfds:<name>:<split>")

    def prepare():
        # Made here, after the chief prepared: a builder made before the data existed has no splits.
        try:
            builder = tfds.builder(name, data_dir=data_dir)
            builder.download_and_prepare()
        except Exception as error:  # noqa: BLE001 - any TFDS failure is a data problem
            raise cli.InputError(f"{flag} {spec}: {error}") from None
        return builder

    builder = chief_first(prepare)
    if "label" not in builder.info.features or "image" not in builder.info.features:
        raise cli.InputError(f"{flag} {spec}: not an image classification dataset")
    return builder, split or None


def _tfds_source(builder, split: str, image_size: int, training: bool, seed: int = 0) -> Source:
    """One split (or slice), each worker reading its own contiguous part of the files (the
    first ``size % workers`` one example more); training reads them in an order fixed by seed."""
    import tensorflow_datasets as tfds

    class_names = tuple(builder.info.features["label"].names)
    size = builder.info.splits[split].num_examples

    def shard(context: tf.distribute.InputContext) -> tf.data.Dataset:
        workers = context.num_input_pipelines
        part = split
        if workers > 1:
            part = tfds.even_splits(split, n=workers)[context.input_pipeline_id]
        return builder.as_dataset(
            split=part,
            as_supervised=True,
            shuffle_files=training,
            read_config=tfds.ReadConfig(shuffle_seed=seed),
        )

    def load(image, label):
        image = tf.image.resize(tf.cast(image, tf.float32), [image_size, image_size])
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        image.set_shape([image_size, image_size, 3])
        return image, tf.cast(label, tf.int32)

    description = f"{size} images from tfds:{builder.name}:{split}"
    return Source(description, class_names, size, shard, load, TFDS_SHUFFLE_BUFFER)


def tfds_sources(
    spec: str,
    eval_spec: str | None,
    image_size: int,
    validation_split: float,
    data_dir: str | None = None,
    chief_first: Callable = run_here,
    seed: int = 0,
) -> tuple[Source, Source]:
    """Train on ``spec``'s split (default ``train``); evaluate on ``eval_spec``, else on the
    ``validation`` or ``test`` split, else on a held-out slice of the training split."""
    builder, split = _tfds_builder(spec, "--train-data", data_dir, chief_first)
    split = split or "train"
    if eval_spec:
        if not eval_spec.startswith(TFDS_PREFIX):
            raise cli.InputError(f"--eval-data {eval_spec}: with tfds training data use tfds:")
        eval_builder, eval_split = _tfds_builder(eval_spec, "--eval-data", data_dir, chief_first)
        if eval_split is None:
            raise cli.InputError(f"--eval-data {eval_spec}: name the split, tfds:<name>:<split>")
    else:
        eval_builder = builder
        known = builder.info.splits
        eval_split = next((name for name in ("validation", "test") if name in known), None)
        if eval_split is None:
            percent = round(100 * (1 - validation_split))
            split, eval_split = f"{split}[:{percent}%]", f"{split}[{percent}%:]"
    train = _tfds_source(builder, split, image_size, training=True, seed=seed)
    evaluation = _tfds_source(eval_builder, eval_split, image_size, training=False)
    if evaluation.class_names != train.class_names:
        raise cli.InputError(f"--eval-data {eval_spec}: other classes than --train-data")
    return train, evaluation
