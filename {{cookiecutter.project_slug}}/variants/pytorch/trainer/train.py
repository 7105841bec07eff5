"""Fine-tune a BERT-family model for text classification with Hugging Face ``Trainer``.

``run`` is called by ``trainer.task`` once per replica. On a machine with several GPUs, or on a
multi-replica Vertex job, it relaunches ``trainer.task`` under torchrun (``trainer.distributed``)
and each of those processes trains one DDP rank here. Checkpoints are mirrored to the checkpoint
dir for restarts (``trainer.resume``), eval accuracy goes to hyperparameter tuning, and rank 0
exports the model with ``save_pretrained``. The last value reported for tuning is always the
exported model's accuracy on the eval set.
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

from trainer import data, distributed
from trainer import model as models
from trainer.metric import METRIC

logger = logging.getLogger(__name__)

KEEP_CHECKPOINTS = 2  # never fewer than 2: a corrupt newest one still leaves one to resume from
SCRATCH_MODEL = "scratch-model"  # the folder of --model-name-or-path=scratch in the work dir


def _check(args) -> None:
    """What the flags' types cannot know (trainer/flags.py declares their ranges)."""
    if args.precision == "fp16" and not torch.cuda.is_available():
        raise cli.InputError("--precision=fp16 needs a GPU")


def run(args, ctx: RunContext) -> int:
    """Train on this replica: in this process, or in torchrun workers when there are several.

    The workers run this process's own command line (``python -m trainer.task ...``) plus
    what only the launcher knows: the node's scratch folder and the scratch model built in it.
    """
    _check(args)
    _plain_logs()
    for directory in (ctx.model_dir, ctx.checkpoint_dir):
        directory.local()  # fails now, not after training, when gs:// has no /gcs/ mount
    if distributed.is_worker():
        work_dir = args.local_dir or _torchrun_scratch()
        return distributed.run_worker(lambda: _train(args, ctx, work_dir))
    job = distributed.plan(ctx.cluster, args.nproc_per_node)
    if job.world_size == 1:
        with _scratch(args.local_dir) as work_dir:
            return _train(args, ctx, work_dir)
    # Check the data once before starting processes (this also downloads it once per node).
    raw = data.load_raw(args)
    with _scratch(args.local_dir) as work_dir:
        extra = [f"--local-dir={work_dir}"]
        if args.model_name_or_path == models.SCRATCH:
            # Once per node, before the workers start; the same model on every node.
            path = _build_scratch(args, raw, os.path.join(work_dir, SCRATCH_MODEL))
            extra.append(f"--model-name-or-path={path}")
        return distributed.launch(job, distributed.worker_argv(extra))


def _plain_logs() -> None:
    """One line per message, all in one format: Cloud Logging makes an entry of each line.

    No progress bars (a line per refresh), and transformers' messages go through the root
    logger's format instead of its own ``[transformers]`` handler.
    """
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()


def _build_scratch(args, raw: data.RawData, folder: str) -> str:
    texts = raw.train[raw.text_column]
    max_length = max(512, args.max_seq_length)
    return models.build_scratch(texts, folder, max_length=max_length, seed=args.seed)


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


def training_arguments(args, output_dir: str) -> TrainingArguments:
    cuda = torch.cuda.is_available()
    precision = _precision(args.precision)
    workers = args.dataloader_workers
    if workers < 0:
        per_process = (os.cpu_count() or 1) // max(1, torch.cuda.device_count())
        workers = min(4, max(0, per_process - 1)) if cuda else 0
    options = dict(
        output_dir=output_dir,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        per_device_eval_batch_size=args.eval_batch_size or 2 * args.batch_size,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps or -1,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        eval_strategy="steps" if args.eval_steps else "epoch",
        eval_steps=args.eval_steps or None,
        save_strategy="steps" if args.save_steps else "epoch",
        save_steps=args.save_steps or 500,
        save_total_limit=KEEP_CHECKPOINTS,
        logging_strategy="steps",
        logging_steps=args.logging_steps,
        logging_first_step=True,
        seed=args.seed,
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
        torch_compile=args.torch_compile,
        disable_tqdm=True,  # progress bars flood Cloud Logging; losses are logged as lines
    )
    if args.torch_compile:
        options["torch_compile_mode"] = args.torch_compile_mode
    if distributed.is_worker():
        options["ddp_backend"] = "nccl" if cuda else "gloo"
    fields = {field.name for field in dataclasses.fields(TrainingArguments)}
    if "warmup_ratio" in fields:  # transformers 4.x
        options["warmup_ratio"] = args.warmup_ratio
    else:  # transformers 5: a float below 1 is a ratio
        options["warmup_steps"] = args.warmup_ratio
    if args.group_by_length:
        if "train_sampling_strategy" in fields:
            options["train_sampling_strategy"] = "group_by_length"
        else:  # transformers before 4.57
            options["group_by_length"] = True
    if "average_tokens_across_devices" in fields:
        # True (the 5.x default) multiplies the classification loss by the number of processes.
        options["average_tokens_across_devices"] = False
    return TrainingArguments(**options)


def compute_metrics(prediction) -> dict[str, float]:
    predictions, labels = prediction.predictions, prediction.label_ids
    return {METRIC: float((predictions == labels).mean())}


def _argmax(logits, labels):
    # Keep only class ids for evaluation, not every logit of a large eval set.
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _train(args, ctx: RunContext, work_dir: str) -> int:
    # Imported here, not at the top: they import transformers' Trainer (seconds), which a
    # replica that only launches torchrun workers never uses; each of its starts is shorter.
    from vertex_trainer_runtime import tracking

    from trainer import batches, preemption_hook, reporting, resume, throughput

    # SIGTERM (a preemption; torchrun's agent forwards it): save at an agreed step, exit. Until
    # training starts there is nothing to save and SIGTERM ends the process at once, also when
    # it waits in a collective or on torchrun's store for a peer that is gone. The handler is
    # installed when training begins (``MirrorCheckpoints.on_train_begin``), before data loader
    # workers fork, which inherit it and so are not ended by it.
    notice = preemption.Notice()
    # Data loader workers fork after the fast tokenizer ran; its threads must not be inherited.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    checkpoint_dir = ctx.checkpoint_dir.local()
    training_args = training_arguments(args, os.path.join(work_dir, "output"))
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
    set_seed(args.seed)

    # The local main process downloads and tokenizes first; the others reuse its caches.
    with training_args.main_process_first(local=True, desc="data and model"):
        raw = data.load_raw(args)
        model_path = args.model_name_or_path
        if model_path == models.SCRATCH:  # one process, or the user's own torchrun
            model_path = os.path.join(work_dir, SCRATCH_MODEL)
            if training_args.local_process_index == 0:
                _build_scratch(args, raw, model_path)
        tokenizer = models.load_tokenizer(model_path)
        train_set, eval_set = data.tokenize(
            raw, tokenizer, args.max_seq_length, args.pad_to_max_length
        )
        model = models.load_model(model_path, raw.label_names)
    resume_from = resume.restore_agreed(
        checkpoint_dir,
        os.path.join(work_dir, "resume"),
        looks=training_args.local_process_index == 0,
        device=training_args.device,
    )
    if resume_from and is_rank0:
        logger.info("Resuming from %s", os.path.basename(resume_from))

    # job.experiment: the chief's rank 0 logs to the job's Experiment run.
    tracker = tracking.start(args, is_rank0 and ctx.cluster.is_chief, ctx.cluster.trial)
    report = reporting.ReportMetric(ctx.metric_reporter(METRIC, enabled=is_rank0), tracker)
    speed = throughput.Throughput(model, training_args.device)
    callbacks = [
        report,
        resume.MirrorCheckpoints(checkpoint_dir, args.checkpoint_minutes, KEEP_CHECKPOINTS, notice),
        reporting.LogProgress(),
        speed,  # before TensorBoard's: it adds the speed to the logs TensorBoard writes
    ]
    if is_rank0:
        board = reporting.tensorboard_callback(ctx.tensorboard_dir)
        if board is not None:
            callbacks.append(board)
    mixed_precision = training_args.fp16 or training_args.bf16
    multiple = batches.padding_multiple(args.torch_compile, mixed_precision)
    trainer = throughput.MeasuredTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=tokenizer,
        data_collator=batches.PaddingCollator(tokenizer, pad_to_multiple_of=multiple),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=_argmax,
        callbacks=callbacks,
        throughput=speed,
    )
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except preemption_hook.EvaluationStopped:
        preemption_hook.save_after_evaluation_stopped(trainer)
    preemption_hook.stopped_early(notice, trainer.state)
    reporting.report_final_model(trainer, report)

    if is_rank0:
        staging = os.path.join(work_dir, "export")
        models.export(trainer.model, tokenizer, ctx.model_dir.local(), staging, args.max_seq_length)
        reporting.log_time_spent(speed.summary())
        # The exported model's accuracy (report_final_model), the time spent and the last speed.
        tracker.finish({METRIC: report.last_value, **speed.summary()})
    if dist.is_available() and dist.is_initialized():  # only in torchrun workers
        dist.barrier()  # every rank is past the export
        distributed.end_worker(0)
    return 0
