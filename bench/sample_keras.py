"""The input pipeline of Google's multi-worker Vertex AI codelab, on the benchmark's data.

The codelab maps the preprocessing (decode, resize, scale) over every example first, then
shuffles the decoded images with a 1000-image buffer, then batches and prefetches:
``map -> shuffle(1000) -> batch -> prefetch``. The buffer holds decoded float images and must
fill before each epoch's first batch. Same model and ``model.fit`` as the bare baseline.
"""

from __future__ import annotations

import argparse
import os

import tensorflow as tf
import tf_keras as keras
from trainer import flags as trainer_flags
from trainer import model as trainer_model


def file_list(folder: str) -> tuple[list[str], list[int]]:
    classes = sorted(os.listdir(folder))
    paths, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted(os.listdir(os.path.join(folder, name))):
            paths.append(os.path.join(folder, name, file))
            labels.append(label)
    return paths, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)

    def preprocess_data(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(image, (args.image_size, args.image_size))
        # The codelab scales to 0..1; the benchmark's models take 0..255, so the same cast
        # and a no-op scale keep the work equal.
        return tf.cast(image, tf.float32) / 1.0, label

    paths, labels = file_list(args.train_data)
    train = tf.data.Dataset.from_tensor_slices((paths, labels))
    train = train.map(preprocess_data, num_parallel_calls=tf.data.AUTOTUNE)
    train = train.shuffle(1000)
    train = train.batch(args.batch_size)
    train = train.prefetch(tf.data.AUTOTUNE)
    model = trainer_model.build(
        trainer_flags.Model(model=args.model, weights="none", fine_tune=False),
        num_classes=2,
        image_size=args.image_size,
        learning_rate=args.learning_rate,
    )
    model.fit(train, epochs=args.epochs, verbose=0)


if __name__ == "__main__":
    main()
