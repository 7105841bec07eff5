"""The input data: synthetic images, an image folder, or a TFDS dataset (tfds_data.py).

YOURS TO CHANGE: add a source or change the decoding. Every source (the runtime's
``vertex_trainer_runtime.keras.sources.Source``) yields float32 ``[size, size, 3]`` pixels in
0..255 (the exported model takes the same) and an int32 label; each worker reads only its shard,
and training order is fixed by the seed and pass (the runtime's ``keras.passes``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import tensorflow as tf
from vertex_trainer_runtime import cli, runtime
from vertex_trainer_runtime.keras import image_checks
from vertex_trainer_runtime.keras.sources import Source, run_here

from trainer import tfds_data
from trainer.flags import Data
from trainer.tfds_data import TFDS_PREFIX

SYNTHETIC = "synthetic"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
# Fixed, so train and eval synthetic sets share class colours whatever --seed is.
_SYNTHETIC_COLOUR_SEED = 20_241_121


def synthetic(size: int, num_classes: int, image_size: int, seed: int, name: str) -> Source:
    """Each class its own colour plus noise; image ``i`` (label ``i % num_classes``) is a pure
    function of ``(seed, i)``, so every worker takes its shard by index."""

    def shard(context: tf.distribute.InputContext) -> tf.data.Dataset:
        keys = tf.data.Dataset.range(size)
        keys = keys.shard(context.num_input_pipelines, context.input_pipeline_id)
        return keys.map(lambda i: (i, tf.cast(i % num_classes, tf.int32)))

    colours = tf.random.stateless_uniform([num_classes, 3], seed=[_SYNTHETIC_COLOUR_SEED, 0])

    def load(index, label):
        noise = tf.random.stateless_uniform(
            [image_size, image_size, 3], seed=tf.stack([tf.cast(seed, tf.int64), index])
        )
        image = 255.0 * (0.6 * tf.gather(colours, label) + 0.4 * noise)
        return image, label

    names = tuple(f"class_{k}" for k in range(num_classes))
    return Source(f"{size} synthetic {name} images", names, size, shard, load)


def decode_image(raw: tf.Tensor, image_size: int) -> tf.Tensor:
    """JPEG/PNG/BMP/GIF bytes -> float32 ``[size, size, 3]``, 0..255: training and serving both."""
    image = tf.io.decode_image(raw, channels=3, expand_animations=False)
    image = tf.image.resize(image, [image_size, image_size])
    image.set_shape([image_size, image_size, 3])
    return image


def list_image_folder(path: str, flag: str) -> tuple[list[str], dict[str, list[str]]]:
    """Class names (sorted sub-folders) and each class's image files (local, /gcs/ or gs://)."""
    root = runtime.strip_trailing_slash(path)
    if not tf.io.gfile.exists(root):
        raise cli.InputError(f"{flag} {path}: no such file or directory")
    if not tf.io.gfile.isdir(root):
        raise cli.InputError(
            f"{flag} {path}: expected a folder with one sub-folder of images per class, "
            f"'{SYNTHETIC}' or '{TFDS_PREFIX}<name>'"
        )
    classes = sorted(
        name.rstrip("/")
        for name in tf.io.gfile.listdir(root)
        if not name.startswith(".") and tf.io.gfile.isdir(f"{root}/{name.rstrip('/')}")
    )
    if not classes:
        raise cli.InputError(
            f"{flag} {path}: no class sub-folders (expected {root}/<class name>/<image>.jpg)"
        )
    files = {}
    for name in classes:
        folder = f"{root}/{name}"
        files[name] = sorted(
            f"{folder}/{entry}"
            for entry in tf.io.gfile.listdir(folder)
            if entry.lower().endswith(IMAGE_EXTENSIONS)
        )
    if not any(files.values()):
        raise cli.InputError(
            f"{flag} {path}: the class sub-folders hold no images ({', '.join(IMAGE_EXTENSIONS)})"
        )
    return classes, files


def _folder_source(
    description: str,
    class_names: list[str],
    examples: list[tuple[str, int]],
    image_size: int,
    flag: str = "--train-data",
) -> Source:
    paths = [path for path, _ in examples]
    labels = [label for _, label in examples]

    def shard(context: tf.distribute.InputContext) -> tf.data.Dataset:
        keys = tf.data.Dataset.from_tensor_slices((paths, tf.constant(labels, tf.int32)))
        return keys.shard(context.num_input_pipelines, context.input_pipeline_id)

    def load(path, label):
        return decode_image(tf.io.read_file(path), image_size), label

    return Source(
        description, tuple(class_names), len(examples), shard, load, files=tuple(paths), flag=flag
    )


def image_folders(
    train_path: str,
    eval_path: str | None,
    image_size: int,
    validation_split: float,
    seed: int,
) -> tuple[Source, Source]:
    """Train and eval sources from class folders; without ``eval_path`` hold out a split."""
    class_names, files = list_image_folder(train_path, "--train-data")
    if len(class_names) < 2:
        raise cli.InputError(
            f"--train-data {train_path}: found 1 class sub-folder ({class_names[0]}); "
            "a classifier needs at least 2"
        )
    index = {name: k for k, name in enumerate(class_names)}
    examples = [(path, index[name]) for name in class_names for path in files[name]]
    image_checks.check_image_files([path for path, _ in examples], "--train-data")
    # Same seed and sorted listing on every worker, so all workers agree on the order (and the
    # split). The listing is sorted by class: shuffled once here, every worker's shard mixes them.
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    if eval_path:
        train, held_out = shuffled, _eval_folder(eval_path, index)
        eval_note, eval_flag = eval_path, "--eval-data"
    else:
        count = max(1, round(len(shuffled) * validation_split))
        if count >= len(shuffled):
            raise cli.InputError(
                f"--train-data {train_path}: {len(shuffled)} images are too few to hold out "
                "a validation split; add images or pass --eval-data"
            )
        held_out, train = shuffled[:count], shuffled[count:]
        eval_note, eval_flag = f"{validation_split:.0%} of {train_path}", "--train-data"
    train_note = f"{len(train)} images in {len(class_names)} classes from {train_path}"
    eval_note = f"{len(held_out)} eval images from {eval_note}"
    return (
        _folder_source(train_note, class_names, train, image_size),
        _folder_source(eval_note, class_names, held_out, image_size, eval_flag),
    )


def _eval_folder(eval_path: str, index: dict[str, int]) -> list[tuple[str, int]]:
    """``--eval-data``'s images and labels: its classes must be among the training ones."""
    eval_classes, eval_files = list_image_folder(eval_path, "--eval-data")
    unknown = sorted(set(eval_classes) - set(index))
    if unknown:
        raise cli.InputError(
            f"--eval-data {eval_path}: classes not in --train-data: {', '.join(unknown)}"
        )
    held_out = [(path, index[name]) for name in eval_classes for path in eval_files[name]]
    image_checks.check_image_files([path for path, _ in held_out], "--eval-data")
    return held_out


def sources(
    shared: cli.SharedFlags, config: Data, image_size: int, chief_first: Callable = run_here
) -> tuple[Source, Source]:
    """The train and eval sources for ``--train-data`` / ``--eval-data`` and the data flags."""
    train_data, eval_data, seed = shared.train_data or SYNTHETIC, shared.eval_data, shared.seed
    validation_split = config.validation_split
    if train_data.startswith(TFDS_PREFIX):
        return tfds_data.tfds_sources(
            train_data,
            eval_data,
            image_size,
            validation_split,
            config.tfds_data_dir,
            chief_first,
            seed,
        )
    if train_data != SYNTHETIC:
        if eval_data == SYNTHETIC:
            raise cli.InputError("--eval-data synthetic goes with --train-data synthetic only")
        return image_folders(train_data, eval_data, image_size, validation_split, seed)
    examples, classes = config.synthetic_examples, config.synthetic_classes
    train = synthetic(examples, classes, image_size, seed, "training")
    if eval_data in (None, SYNTHETIC):
        return train, synthetic(max(1, examples // 4), classes, image_size, seed + 1, "eval")
    raise cli.InputError(f"--eval-data {eval_data}: with --train-data synthetic use synthetic")
