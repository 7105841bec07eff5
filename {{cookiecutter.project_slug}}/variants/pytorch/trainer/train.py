"""YOURS TO CHANGE: how the Hugging Face ``Trainer`` trains (``training_arguments``) and what
an evaluation measures (``compute_metrics``).

The run itself, in its fixed order, is the runtime's (``vertex_trainer_runtime.torch.run``,
``SPEC.run``): torchrun when a replica has several processes, restore from the newest complete
checkpoint, the checkpoint mirror and the preemption notice, the callbacks in their required
order, the last-measurement rule, the export on rank 0. ``make eject-runtime`` makes it yours.
"""

from __future__ import annotations

import dataclasses
import os

import torch
from transformers import TrainingArguments
from vertex_trainer_runtime.torch import checkpoint_mirror, distributed

from trainer.flags import Flags
from trainer.spec import SPEC


def _precision(choice: str) -> str | None:
    if choice == "auto":
        if not torch.cuda.is_available():
            return None
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    return None if choice == "fp32" else choice


def _dataloader_workers(requested: int) -> int:
    if requested >= 0:
        return requested
    if not torch.cuda.is_available():
        return 0
    per_process = (os.cpu_count() or 1) // max(1, torch.cuda.device_count())
    return min(4, max(0, per_process - 1))


def training_arguments(flags: Flags, output_dir: str) -> TrainingArguments:
    """The flags' training, schedule and batching choices as Hugging Face ``TrainingArguments``."""
    training, schedule, cuda = flags.training, flags.schedule, torch.cuda.is_available()
    precision = _precision(training.precision)
    workers = _dataloader_workers(training.dataloader_workers)
    # Outside the marked lines, what the checkpoint mirror, the tuning report and the logs rely on.
    options = dict(
        output_dir=output_dir,
        # --- yours to change --- (batching and the optimizer; a new one: a Training flag)
        per_device_train_batch_size=training.batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        per_device_eval_batch_size=training.eval_batch_size or 2 * training.batch_size,
        num_train_epochs=training.epochs,
        max_steps=training.max_steps or -1,
        learning_rate=training.learning_rate,
        weight_decay=training.weight_decay,
        # --- end ---
        eval_strategy="steps" if schedule.eval_steps else "epoch",
        eval_steps=schedule.eval_steps or None,
        save_strategy="steps" if schedule.save_steps else "epoch",
        save_steps=schedule.save_steps or 500,
        save_total_limit=checkpoint_mirror.KEEP_CHECKPOINTS,
        logging_strategy="steps",
        logging_steps=schedule.logging_steps,
        logging_first_step=True,
        seed=flags.shared.seed,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=not cuda,
        ddp_find_unused_parameters=False,
        dataloader_num_workers=workers,
        dataloader_pin_memory=cuda,
        dataloader_persistent_workers=workers > 0,
        report_to="none",
        # Its NaN check reads every step's loss on the host: a wait for the GPU at each step.
        logging_nan_inf_filter=False,
        torch_compile=training.torch_compile,
        disable_tqdm=True,  # progress bars flood Cloud Logging; losses are logged as lines
    )
    return TrainingArguments(**options, **_more_options(training, flags.data.group_by_length))


def _more_options(training, group_by_length: bool) -> dict:
    """``torch.compile``'s mode, the backend of torchrun's workers, and the version options."""
    options = _version_options(training, group_by_length)
    if training.torch_compile:
        options["torch_compile_mode"] = training.torch_compile_mode
    if distributed.is_worker():
        options["ddp_backend"] = "nccl" if torch.cuda.is_available() else "gloo"
    return options


def _version_options(training, group_by_length: bool) -> dict:
    """Options spelled differently by transformers 4.x and 5."""
    fields = {field.name for field in dataclasses.fields(TrainingArguments)}
    options = {}
    if "warmup_ratio" in fields:  # transformers 4.x
        options["warmup_ratio"] = training.warmup_ratio
    else:  # transformers 5: a float below 1 is a ratio
        options["warmup_steps"] = training.warmup_ratio
    if group_by_length:
        if "train_sampling_strategy" in fields:
            options["train_sampling_strategy"] = "group_by_length"
        else:  # transformers before 4.57
            options["group_by_length"] = True
    if "average_tokens_across_devices" in fields:
        # True (the 5.x default) multiplies the classification loss by the number of processes.
        options["average_tokens_across_devices"] = False
    return options


def compute_metrics(prediction) -> dict[str, float]:
    """``SPEC.evaluate``: the tuning metric, and any other, of the eval set's predicted class ids
    (the runtime keeps only the argmax of the logits)."""
    predictions, labels = prediction.predictions, prediction.label_ids
    return {SPEC.metric: float((predictions == labels).mean())}
