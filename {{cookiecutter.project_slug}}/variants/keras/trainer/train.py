"""What the training run takes from this trainer: its data, its model and its export.

YOURS TO CHANGE: which data and model a run builds from the flags, and what it exports.
``trainer/spec.py`` names these functions; the runtime's ``vertex_trainer_runtime.keras.run``
calls them in its fixed order (the strategy, the preemption notice, the restore of the
checkpoint, the callbacks, the epochs, the export on the right task), the one code path for a
laptop, one VM and a multi-worker job. ``make eject-runtime`` copies that loop here if you
want to change it.
"""

from __future__ import annotations

import tf_keras as keras
from vertex_trainer_runtime import cli
from vertex_trainer_runtime.keras import precision
from vertex_trainer_runtime.keras.sources import Source, run_here

from trainer import data, model
from trainer.flags import PRECISIONS, Flags

assert PRECISIONS == precision.PRECISIONS, "trainer/flags.py offers the policies precision applies"


def image_size(flags: Flags) -> int:
    """The side of the square images the model takes (``--image-size``), or InputError."""
    synthetic = (flags.shared.train_data or data.SYNTHETIC) == data.SYNTHETIC
    size = flags.model.image_side(synthetic)
    if flags.model.model != model.SMALL_CNN and size < model.MIN_APPLICATION_SIZE:
        raise cli.InputError(
            f"--image-size {size}: {flags.model.model} needs at least {model.MIN_APPLICATION_SIZE}"
        )
    return size


def make_data(flags: Flags, chief_first=run_here) -> tuple[Source, Source]:
    """The train and eval sources; ``chief_first(action)`` runs work on shared storage (a TFDS
    download) on the chief while the other tasks wait."""
    return data.sources(flags.shared, flags.data, image_size(flags), chief_first)


def make_model(flags: Flags, train_source: Source) -> keras.Model:
    """The compiled classifier (the run builds it in the strategy's scope, after the precision
    policy, and restores the checkpoint into it)."""
    return model.build(
        flags.model,
        train_source.num_classes,
        image_size(flags),
        flags.training.learning_rate,
        jit_compile=flags.speed.jit_compile,
    )


def export(classifier: keras.Model, train_source: Source, path: str) -> None:
    """The SavedModel for serving, with the training classes' names."""
    side = classifier.input_shape[1]  # the model takes the images it was trained on
    model.export(classifier, train_source.class_names, side, path)
