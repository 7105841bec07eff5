"""YOURS TO CHANGE: the flags of ``python -m trainer.task``, in typed sections. A new flag is one
field here and its use where its section is read (``train.run(flags, ctx)`` hands them out).

Framework-free: ``trainer/spec.py`` declares these flags, and the tools read them there to
refuse a flag or study parameter the trainer lacks.
"""

from __future__ import annotations

import argparse
import dataclasses

from vertex_trainer_runtime import cli
from vertex_trainer_runtime.cli import flag


def _warmup_ratio(value: str) -> float:
    number = cli.non_negative_float(value)
    if number >= 1:
        raise argparse.ArgumentTypeError(f"expected a share of steps in [0, 1), got {value!r}")
    return number


def _names(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


@dataclasses.dataclass(frozen=True)
class Model:
    """model"""

    model_name_or_path: str = flag(
        "bert-base-cased",
        "Hugging Face Hub id, a save_pretrained folder (local, /gcs/ or gs://), or "
        "'scratch': a small BERT built from the training texts, for offline smoke runs",
    )


@dataclasses.dataclass(frozen=True)
class Data:
    """data: columns, classes, tokenization"""

    text_column: str = flag("text", "column with the text")
    label_column: str = flag("label", "column with the class")
    max_seq_length: int = flag(128, "truncate to this", type=cli.positive_integer)
    pad_to_max_length: bool = flag(
        False,
        "pad every example to --max-seq-length (slower; for comparison with the default "
        "dynamic padding to each batch's longest example)",
    )
    group_by_length: bool = flag(
        True,
        "batch examples of similar length together, so dynamic padding pads less "
        "(measured: 1.8x the samples/s of random batches at 512 tokens on IMDB-like lengths)",
    )
    max_train_samples: int = flag(0, "use at most N (0: all)", type=cli.non_negative_integer)
    max_eval_samples: int = flag(0, "0: all", type=cli.non_negative_integer)
    label_names: tuple[str, ...] | None = flag(
        None,
        "the classes in id order, comma-separated (e.g. neg,pos): labels not listed are "
        "refused; without it the sorted label values, and a class of a few rows is refused "
        "as a likely typo",
        type=_names,
    )


@dataclasses.dataclass(frozen=True)
class Training:
    """training"""

    epochs: float = flag(2.0, "training epochs", type=cli.positive_float)
    max_steps: int = flag(0, "stop after N steps (0: use --epochs)", type=cli.non_negative_integer)
    batch_size: int = flag(16, "per process (per GPU)", type=cli.positive_integer)
    gradient_accumulation_steps: int = flag(
        1,
        "batches per optimizer step: the global batch is --batch-size x processes x this, "
        "for a large batch on few GPUs",
        type=cli.positive_integer,
    )
    eval_batch_size: int = flag(
        0, "per process (0: 2x --batch-size)", type=cli.non_negative_integer
    )
    learning_rate: float = flag(2e-5, type=cli.positive_float)
    weight_decay: float = flag(0.0, type=cli.non_negative_float)
    warmup_ratio: float = flag(0.0, "share of steps, < 1", type=_warmup_ratio)
    precision: str = flag(
        "auto",
        "auto: bf16 on GPUs that support it, else fp16 on GPU, fp32 on CPU",
        choices=["auto", "fp32", "bf16", "fp16"],
    )
    dataloader_workers: int = flag(
        -1, "data loader processes per training process (-1: 4 on GPU, 0 on CPU)"
    )
    torch_compile: bool = flag(
        False,
        "compile the model with torch.compile (TrainingArguments.torch_compile): faster "
        "steps on a GPU after a compilation of about a minute; batches are padded to "
        "multiples of 64 so that new lengths reuse the compiled graphs, and a restart reuses "
        "them too (the compiler's cache is saved beside the checkpoints)",
        negatable=True,
    )
    torch_compile_mode: str = flag(
        "default",
        "torch.compile's mode, with --torch-compile",
        choices=["default", "reduce-overhead", "max-autotune"],
    )


@dataclasses.dataclass(frozen=True)
class Schedule:
    """evaluation and checkpoints"""

    eval_steps: int = flag(
        0, "evaluate every N steps (0: each epoch)", type=cli.non_negative_integer
    )
    save_steps: int = flag(
        0,
        "checkpoint every N steps (0: each epoch); see also --checkpoint-minutes",
        type=cli.non_negative_integer,
    )
    logging_steps: int = flag(50, type=cli.positive_integer)


@dataclasses.dataclass(frozen=True)
class Distributed:
    """distributed"""

    nproc_per_node: int = flag(
        0,
        "training processes per replica (0: one per GPU, one on CPU)",
        type=cli.non_negative_integer,
    )
    local_dir: str | None = flag(
        None,
        "local scratch folder for Trainer checkpoints (default: a fresh temporary folder)",
    )


@dataclasses.dataclass(frozen=True)
class Flags:
    """Every flag, by section; ``trainer.task`` parses them and calls ``train.run(flags, ctx)``."""

    shared: cli.SharedFlags
    model: Model
    data: Data
    training: Training
    schedule: Schedule
    distributed: Distributed
    tensorboard: cli.TensorBoardFlags
