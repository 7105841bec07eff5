"""YOURS TO CHANGE: the training loop, Hugging Face ``Trainer`` fed from the flags' sections.

``run`` trains here, or relaunches ``trainer.task`` under torchrun when there are several
processes (``vertex_trainer_runtime.torch.distributed``); rank 0 exports. The last tuning value
is the exported model's eval accuracy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile

import datasets
import torch
import torch.distributed as dist
from transformers import TrainingArguments, set_seed
from transformers.utils import logging as hf_logging
from vertex_trainer_runtime import cli, preemption
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.torch import distributed

from trainer import data
from trainer import model as models
from trainer.flags import Flags
from trainer.spec import SPEC

logger = logging.getLogger(__name__)

KEEP_CHECKPOINTS = 2  # never fewer than 2: a corrupt newest one still leaves one to resume from
SCRATCH_MODEL = "scratch-model"  # the folder of --model-name-or-path=scratch in the work dir


def run(flags: Flags, ctx: RunContext) -> int:
    """Train on this replica: in this process, or in torchrun workers when there are several.

    The workers get this process's command line plus the node's scratch folder and model.
    """
    if flags.training.precision == "fp16" and not torch.cuda.is_available():
        raise cli.InputError("--precision=fp16 needs a GPU")
    _plain_logs()
    for directory in (ctx.model_dir, ctx.checkpoint_dir):
        directory.local()  # fails now, not after training, when gs:// has no /gcs/ mount
    local_dir = flags.distributed.local_dir
    if distributed.is_worker():
        work_dir = local_dir or _torchrun_scratch()
        return distributed.run_worker(lambda: _train(flags, ctx, work_dir))
    job = distributed.plan(ctx.cluster, flags.distributed.nproc_per_node)
    if job.world_size == 1:
        with _scratch(local_dir) as work_dir:
            return _train(flags, ctx, work_dir)
    # Check the data once before starting processes (this also downloads it once per node).
    raw = data.load_raw(flags.shared, flags.data)
    with _scratch(local_dir) as work_dir:
        extra = [f"--local-dir={work_dir}"]
        if flags.model.model_name_or_path == models.SCRATCH:
            # Once per node, before the workers start; the same model on every node.
            path = _build_scratch(flags, raw, os.path.join(work_dir, SCRATCH_MODEL))
            extra.append(f"--model-name-or-path={path}")
        return distributed.launch(job, distributed.worker_argv(extra), module="trainer.task")


def _plain_logs() -> None:
    """One line per message in the root logger's format (Cloud Logging: an entry per line)."""
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()


def _build_scratch(flags: Flags, raw: data.RawData, folder: str) -> str:
    texts = raw.train[raw.text_column]
    max_length = max(512, flags.data.max_seq_length)
    return models.build_scratch(texts, folder, max_length=max_length, seed=flags.shared.seed)


@contextlib.contextmanager
def _scratch(local_dir: str | None):
    """The given folder, or a fresh temporary one removed afterwards."""
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
        yield local_dir
        return
    work_dir = tempfile.mkdtemp(prefix="trainer-")
    try:
        yield work_dir
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _torchrun_scratch() -> str:
    # Started by the user's own torchrun: all local ranks must agree on one folder.
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    return os.path.join(tempfile.gettempdir(), f"trainer-{run_id}")


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
        save_total_limit=KEEP_CHECKPOINTS,
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
    if training.torch_compile:
        options["torch_compile_mode"] = training.torch_compile_mode
    if distributed.is_worker():
        options["ddp_backend"] = "nccl" if cuda else "gloo"
    return TrainingArguments(**options, **_version_options(training, flags.data.group_by_length))


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
    predictions, labels = prediction.predictions, prediction.label_ids
    return {SPEC.metric: float((predictions == labels).mean())}


def _argmax(logits, labels):
    # Keep only class ids for evaluation, not every logit of a large eval set.
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _load(flags: Flags, training_args: TrainingArguments, work_dir: str):
    """(model, tokenizer, train set, eval set): the local main process downloads and
    tokenizes first, the node's other processes reuse its caches."""
    with training_args.main_process_first(local=True, desc="data and model"):
        raw = data.load_raw(flags.shared, flags.data)
        model_path = flags.model.model_name_or_path
        if model_path == models.SCRATCH:  # one process, or the user's own torchrun
            model_path = os.path.join(work_dir, SCRATCH_MODEL)
            if training_args.local_process_index == 0:
                _build_scratch(flags, raw, model_path)
        tokenizer = models.load_tokenizer(model_path)
        train_set, eval_set = data.tokenize(
            raw, tokenizer, flags.data.max_seq_length, flags.data.pad_to_max_length
        )
        model = models.load_model(model_path, raw.label_names)
    return model, tokenizer, train_set, eval_set


def _trainer(flags: Flags, training_args, model, tokenizer, splits, callbacks, board):
    """The Hugging Face ``Trainer`` with ``callbacks``, then the progress and speed logs and
    TensorBoard in ``board`` (an ``OutputDir``, or None), and this trainer's batches."""
    from vertex_trainer_runtime.torch import batches, throughput

    from trainer import reporting

    speed = throughput.Throughput(model, training_args.device)
    # The speed before TensorBoard: it adds its figures to the logs TensorBoard writes.
    callbacks = [*callbacks, reporting.LogProgress(), speed]
    if board is not None:
        callbacks += reporting.tensorboard_callbacks(board)
    mixed_precision = training_args.fp16 or training_args.bf16
    multiple = batches.padding_multiple(flags.training.torch_compile, mixed_precision)
    return throughput.MeasuredTrainer(
        model=model,
        args=training_args,
        train_dataset=splits[0],
        eval_dataset=splits[1],
        processing_class=tokenizer,
        data_collator=batches.PaddingCollator(tokenizer, pad_to_multiple_of=multiple),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=_argmax,
        callbacks=callbacks,
        throughput=speed,
    )


def _train(flags: Flags, ctx: RunContext, work_dir: str) -> int:
    # Imported here: they import transformers' Trainer (seconds), which a replica that only
    # launches torchrun workers never uses.
    from vertex_trainer_runtime import tracking
    from vertex_trainer_runtime.torch import compile_cache, preemption_hook

    from trainer import reporting, resume

    # SIGTERM saves at an agreed step once training began (MirrorCheckpoints.on_train_begin
    # installs the handler, before data loader workers fork); until then it ends the process.
    notice = preemption.Notice()
    # Data loader workers fork after the fast tokenizer ran; its threads must not be inherited.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    checkpoint_dir = ctx.checkpoint_dir.local()
    training_args = training_arguments(flags, os.path.join(work_dir, "output"))
    is_rank0 = training_args.process_index == 0
    if is_rank0:
        logger.info(
            "Processes: %d (%s); outputs: model %s, checkpoints %s, logs %s",
            training_args.world_size,
            training_args.device,
            ctx.model_dir,
            ctx.checkpoint_dir,
            ctx.tensorboard_dir,
        )
    set_seed(flags.shared.seed)
    model, tokenizer, train_set, eval_set = _load(flags, training_args, work_dir)
    resume_from = resume.restore(checkpoint_dir, work_dir, training_args)

    # job.experiment: the chief's rank 0 logs to the job's Experiment run.
    tracker = tracking.start(flags, is_rank0 and ctx.cluster.is_chief, ctx.cluster.trial)
    report = reporting.ReportMetric(ctx.metric_reporter(SPEC.metric, enabled=is_rank0), tracker)
    minutes = flags.shared.checkpoint_minutes
    mirror = resume.mirror(checkpoint_dir, minutes, KEEP_CHECKPOINTS, notice)
    board = ctx.tensorboard_dir if is_rank0 else None
    splits = (train_set, eval_set)
    callbacks = [report, mirror]
    if flags.training.torch_compile:  # a restart reuses the graphs compiled before it
        callbacks.append(compile_cache.CompileCache(checkpoint_dir))
    trainer = _trainer(flags, training_args, model, tokenizer, splits, callbacks, board)
    preemption_hook.fit(trainer, notice, resume_from)
    reporting.report_final_model(trainer, report)

    if is_rank0:
        staging = os.path.join(work_dir, "export")
        max_length = flags.data.max_seq_length
        models.export(trainer.model, tokenizer, ctx.model_dir.local(), staging, max_length)
        speed = trainer.throughput.summary()
        reporting.log_time_spent(speed)
        if ctx.cluster.is_chief:
            reporting.write_goodput(ctx.tensorboard_dir, trainer.state.global_step)
        # The exported model's accuracy (report_final_model), the time spent and the last speed.
        tracker.finish({SPEC.metric: report.last_value, **speed})
    if dist.is_available() and dist.is_initialized():  # only in torchrun workers
        dist.barrier()  # every rank is past the export
        distributed.end_worker(0)
    return 0
