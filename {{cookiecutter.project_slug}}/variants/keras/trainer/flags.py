"""The flags of ``python -m trainer.task``: the shared ones (``vertex_trainer_runtime.cli``) and
this trainer's.

Framework-free on purpose: the tools (``make check``, ``make submit-hpt``, the local emulator)
import it to know the trainer's flags, so a study parameter or a ``job.args`` flag the trainer
lacks is refused before any job starts. Add a flag here and read it in ``train.run(args, ctx)``.
"""

from __future__ import annotations

import argparse

from vertex_trainer_runtime import cli

DEFAULT_IMAGE_SIZE = 224
SYNTHETIC_IMAGE_SIZE = 32
# The models trainer/model.py builds (Keras applications, then a small CNN for tests).
MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0", "small-cnn")
WEIGHTS = ("imagenet", "none")
# Keras's mixed-precision policy names; "auto" picks one for the GPU (trainer/precision.py).
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def _validation_split(value: str) -> float:
    number = cli.non_negative_float(value)
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value!r}")
    return number


DESCRIPTION = "Train a Keras image classifier on Vertex AI or locally."
# Why job.reduction_server is of no use to this trainer (`make check` refuses it); None: it is.
# MultiWorkerMirroredStrategy all-reduces with NCCL when a Reduction Server is there (train.py).
NO_REDUCTION_SERVER = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    training = parser.add_argument_group("training (hyperparameter-tuning parameters too)")
    training.add_argument("--epochs", type=cli.positive_integer, default=10)
    training.add_argument(
        "--batch-size",
        type=cli.positive_integer,
        default=32,
        help="per replica; the global batch is this times the number of replicas",
    )
    training.add_argument("--learning-rate", type=cli.positive_float, default=1e-3)
    training.add_argument(
        "--steps-per-epoch",
        type=cli.positive_integer,
        default=None,
        help="default: one pass over the training images (the last step takes the rest)",
    )
    network = parser.add_argument_group("model")
    network.add_argument("--model", choices=MODELS, default="resnet50")
    network.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="imagenet",
        help="'imagenet' downloads pretrained weights; 'none' trains from scratch (offline)",
    )
    network.add_argument(
        "--fine-tune",
        action="store_true",
        help="also train the pretrained layers (default: frozen with --weights=imagenet)",
    )
    network.add_argument(
        "--image-size",
        type=cli.positive_integer,
        default=None,
        help=f"images are resized to this square (default: {DEFAULT_IMAGE_SIZE}, "
        f"{SYNTHETIC_IMAGE_SIZE} for synthetic data)",
    )
    speed = parser.add_argument_group("speed")
    speed.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="Keras mixed-precision policy; auto: mixed_bfloat16 on GPUs with native bfloat16 "
        "(compute capability 8.0+: A100, L4, H100), mixed_float16 with loss scaling on T4/V100, "
        "float32 on CPU",
    )
    speed.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the training step with XLA (model.compile(jit_compile=True)); "
        "tf-keras's default is off",
    )
    speed.add_argument(
        "--logging-steps",
        type=cli.positive_integer,
        default=50,
        help="the chief logs examples/s and step time every this many steps",
    )
    inputs = parser.add_argument_group("input data (see also --train-data, --eval-data)")
    inputs.add_argument(
        "--validation-split",
        type=_validation_split,
        default=0.1,
        help="fraction of an image folder held out for evaluation when --eval-data is not given",
    )
    inputs.add_argument("--synthetic-examples", type=cli.positive_integer, default=512)
    inputs.add_argument("--synthetic-classes", type=cli.positive_integer, default=4)
    inputs.add_argument(
        "--tfds-data-dir",
        default=None,
        help="where tfds:<name> datasets are prepared, e.g. gs://bucket/tensorflow_datasets "
        "(default: $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    )


def parser() -> argparse.ArgumentParser:
    """The whole command line: shared flags, then this trainer's."""
    result = cli.base_parser(DESCRIPTION)
    add_arguments(result)
    result.add_argument(
        "--tensorboard-dir",
        default=None,
        help="where TensorBoard logs go (AIP_TENSORBOARD_LOG_DIR)",
    )
    return result
