"""The bare Keras baseline: ``image_dataset_from_directory`` + ``model.fit``, nothing else.

Same image folder, same model (built by the generated project's own ``trainer.model.build``,
so the architecture cannot drift), same batch size; no callbacks, no checkpoints, no
distribution strategy. With ``--eval-data``, Keras's own validation after each epoch (the
trainer's default evaluates every eval image once per epoch too).
"""

from __future__ import annotations

import argparse

import tensorflow as tf
import tf_keras as keras
from trainer import flags as trainer_flags
from trainer import model as trainer_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--eval-data", default=None, help="validation after each epoch")
    parser.add_argument("--model", required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)

    train = keras.utils.image_dataset_from_directory(
        args.train_data,
        image_size=(args.image_size, args.image_size),
        batch_size=args.batch_size,
        seed=args.seed,
    ).prefetch(tf.data.AUTOTUNE)
    model = trainer_model.build(
        trainer_flags.Model(model=args.model, weights="none", fine_tune=False),
        num_classes=2,
        image_size=args.image_size,
        learning_rate=args.learning_rate,
    )
    validation = None
    if args.eval_data:
        validation = keras.utils.image_dataset_from_directory(
            args.eval_data,
            image_size=(args.image_size, args.image_size),
            batch_size=args.batch_size,
            shuffle=False,
        ).prefetch(tf.data.AUTOTUNE)
    model.fit(train, epochs=args.epochs, validation_data=validation, verbose=0)


if __name__ == "__main__":
    main()
