"""The flags of ``python -m trainer.task``: typed sections, parsed once by ``cli.parse``.

YOURS TO CHANGE: a new flag is one field in a section below and its use where the section is
read (``trainer/train.py`` hands data and model the sections they need; the runtime's run reads
``shared``, ``training`` and ``speed``). Framework-free: ``trainer/spec.py`` declares these
flags, and the tools (``make check``, ``make submit-hpt``, ``local-run``) read them from there.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from vertex_trainer_runtime import cli

DEFAULT_IMAGE_SIZE = 224
SYNTHETIC_IMAGE_SIZE = 32
# The models trainer/model.py builds (Keras applications, then a small CNN for tests).
MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0", "small-cnn")
WEIGHTS = ("imagenet", "none")
# Keras's mixed-precision policy names; "auto" picks one for the GPU
# (vertex_trainer_runtime.keras.precision, which train.py holds equal to these).
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def _validation_split(value: str) -> float:
    number = cli.non_negative_float(value)
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value!r}")
    return number


@dataclass(frozen=True)
class Training:
    """training (hyperparameter-tuning parameters too)"""

    epochs: int = cli.flag(10, type=cli.positive_integer)
    batch_size: int = cli.flag(
        32,
        "per replica; the global batch is this times the number of replicas",
        type=cli.positive_integer,
    )
    learning_rate: float = cli.flag(1e-3, type=cli.positive_float)
    steps_per_epoch: int | None = cli.flag(
        None,
        "default: one pass over the training images (the last step takes the rest)",
        type=cli.positive_integer,
    )


@dataclass(frozen=True)
class Model:
    """model"""

    model: str = cli.flag("resnet50", choices=MODELS)
    weights: str = cli.flag(
        "imagenet",
        "'imagenet' downloads pretrained weights; 'none' trains from scratch (offline)",
        choices=WEIGHTS,
    )
    fine_tune: bool = cli.flag(
        False, "also train the pretrained layers (default: frozen with --weights=imagenet)"
    )
    image_size: int | None = cli.flag(
        None,
        f"images are resized to this square (default: {DEFAULT_IMAGE_SIZE}, "
        f"{SYNTHETIC_IMAGE_SIZE} for synthetic data)",
        type=cli.positive_integer,
    )

    def image_side(self, synthetic: bool) -> int:
        """``--image-size``, else the default for the data."""
        return self.image_size or (SYNTHETIC_IMAGE_SIZE if synthetic else DEFAULT_IMAGE_SIZE)


@dataclass(frozen=True)
class Speed:
    """speed"""

    precision: str = cli.flag(
        "auto",
        "Keras mixed-precision policy; auto: mixed_bfloat16 on GPUs with native bfloat16 "
        "(compute capability 8.0+: A100, L4, H100), mixed_float16 with loss scaling on T4/V100, "
        "float32 on CPU",
        choices=PRECISIONS,
    )
    jit_compile: bool = cli.flag(
        False,
        "compile the training step with XLA (model.compile(jit_compile=True)); "
        "tf-keras's default is off",
    )
    logging_steps: int = cli.flag(
        50,
        "the chief logs examples/s and step time every this many steps",
        type=cli.positive_integer,
    )


@dataclass(frozen=True)
class Data:
    """input data (see also --train-data, --eval-data)"""

    validation_split: float = cli.flag(
        0.1,
        "fraction of an image folder held out for evaluation when --eval-data is not given",
        type=_validation_split,
    )
    synthetic_examples: int = cli.flag(512, type=cli.positive_integer)
    synthetic_classes: int = cli.flag(4, type=cli.positive_integer)
    tfds_data_dir: str | None = cli.flag(
        None,
        "where tfds:<name> datasets are prepared, e.g. gs://bucket/tensorflow_datasets "
        "(default: $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    )


@dataclass(frozen=True)
class Flags:
    """Every flag, by section: ``flags.training.epochs``, ``flags.shared.seed``."""

    shared: cli.SharedFlags
    training: Training
    model: Model
    speed: Speed
    data: Data
    tensorboard: cli.TensorBoardFlags
