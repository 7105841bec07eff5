"""The flags of ``python -m trainer.task``: the shared ones (``vertex_trainer_runtime.cli``) and
this trainer's.

Framework-free on purpose: the tools (``make check``, ``make submit-hpt``, the local emulator)
import it to know the trainer's flags, so a study parameter or a ``job.args`` flag the trainer
lacks is refused before any job starts. Add a flag here and read it in ``train.run(args, ctx)``.
"""

from __future__ import annotations

import argparse

from vertex_trainer_runtime import cli


def _warmup_ratio(value: str) -> float:
    number = cli.non_negative_float(value)
    if number >= 1:
        raise argparse.ArgumentTypeError(f"expected a share of steps in [0, 1), got {value!r}")
    return number


DESCRIPTION = (
    "Fine-tune a BERT-family model (Hugging Face transformers) for text classification; "
    "IMDB sentiment by default."
)
# Why job.reduction_server is of no use to this trainer (`make check` refuses it); None: it is.
# DDP all-reduces gradients with NCCL on GPUs; the reducers are not ranks (distributed.py).
NO_REDUCTION_SERVER = None


def add_arguments(parser) -> None:
    group = parser.add_argument_group("model and data")
    group.add_argument(
        "--model-name-or-path",
        default="bert-base-cased",
        help="Hugging Face Hub id, a save_pretrained folder (local, /gcs/ or gs://), or "
        "'scratch': a small BERT built from the training texts, for offline smoke runs",
    )
    group.add_argument("--text-column", default="text", help="column with the text")
    group.add_argument("--label-column", default="label", help="column with the class")
    group.add_argument(
        "--max-seq-length", type=cli.positive_integer, default=128, help="truncate to this"
    )
    group.add_argument(
        "--pad-to-max-length",
        action="store_true",
        help="pad every example to --max-seq-length (slower; for comparison with the default "
        "dynamic padding to each batch's longest example)",
    )
    group.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batch examples of similar length together, so dynamic padding pads less "
        "(measured: 1.8x the samples/s of random batches at 512 tokens on IMDB-like lengths)",
    )
    group.add_argument(
        "--max-train-samples",
        type=cli.non_negative_integer,
        default=0,
        help="use at most N (0: all)",
    )
    group.add_argument(
        "--max-eval-samples", type=cli.non_negative_integer, default=0, help="0: all"
    )
    group.add_argument(
        "--label-names",
        type=lambda value: [name.strip() for name in value.split(",") if name.strip()],
        default=None,
        help="the classes in id order, comma-separated (e.g. neg,pos): labels not listed are "
        "refused; without it the sorted label values, and a class of a few rows is refused "
        "as a likely typo",
    )

    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=cli.positive_float, default=2.0, help="training epochs")
    group.add_argument(
        "--max-steps",
        type=cli.non_negative_integer,
        default=0,
        help="stop after N steps (0: use --epochs)",
    )
    group.add_argument(
        "--batch-size", type=cli.positive_integer, default=16, help="per process (per GPU)"
    )
    group.add_argument(
        "--gradient-accumulation-steps",
        type=cli.positive_integer,
        default=1,
        help="batches per optimizer step: the global batch is --batch-size x processes x this, "
        "for a large batch on few GPUs",
    )
    group.add_argument(
        "--eval-batch-size",
        type=cli.non_negative_integer,
        default=0,
        help="per process (0: 2x --batch-size)",
    )
    group.add_argument("--learning-rate", type=cli.positive_float, default=2e-5)
    group.add_argument("--weight-decay", type=cli.non_negative_float, default=0.0)
    group.add_argument(
        "--warmup-ratio", type=_warmup_ratio, default=0.0, help="share of steps, < 1"
    )
    group.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        default="auto",
        help="auto: bf16 on GPUs that support it, else fp16 on GPU, fp32 on CPU",
    )
    group.add_argument(
        "--dataloader-workers",
        type=cli.integer,
        default=-1,
        help="data loader processes per training process (-1: 4 on GPU, 0 on CPU)",
    )
    group.add_argument(
        "--torch-compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="compile the model with torch.compile (TrainingArguments.torch_compile): faster "
        "steps on a GPU after a compilation of about a minute; batches are padded to "
        "multiples of 64 so that new lengths reuse the compiled graphs",
    )
    group.add_argument(
        "--torch-compile-mode",
        choices=["default", "reduce-overhead", "max-autotune"],
        default="default",
        help="torch.compile's mode, with --torch-compile",
    )

    group = parser.add_argument_group("evaluation and checkpoints")
    group.add_argument(
        "--eval-steps",
        type=cli.non_negative_integer,
        default=0,
        help="evaluate every N steps (0: each epoch)",
    )
    group.add_argument(
        "--save-steps",
        type=cli.non_negative_integer,
        default=0,
        help="checkpoint every N steps (0: each epoch); see also --checkpoint-minutes",
    )
    group.add_argument("--logging-steps", type=cli.positive_integer, default=50)

    group = parser.add_argument_group("distributed")
    group.add_argument(
        "--nproc-per-node",
        type=cli.non_negative_integer,
        default=0,
        help="training processes per replica (0: one per GPU, one on CPU)",
    )
    group.add_argument(
        "--local-dir",
        default=None,
        help="local scratch folder for Trainer checkpoints (default: a fresh temporary folder)",
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
