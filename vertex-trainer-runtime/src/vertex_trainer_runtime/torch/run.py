"""A PyTorch trainer's run in its fixed order: ``run(flags, ctx)``, named by ``SPEC.run``.

In this process, or relaunched under torchrun when a replica has several processes
(:mod:`.distributed`): the preemption notice, restore from the newest complete checkpoint every
node agrees on (:mod:`.checkpoint_mirror`), the Hugging Face ``Trainer`` with its callbacks in
their required order, the compile cache, the last-measurement rule (:mod:`.reporting`) and the
export on rank 0 only. The user's parts are the declaration's names (``ctx.spec``):

- ``make_data(flags)``: the checked, untokenized data (once per node before workers start, too)
- ``worker_flags(flags, data, work_dir)``: what a node prepares for its torchrun workers before
  they start, as flags added to their command line (optional)
- ``make_model(flags, data, work_dir, first)``: ``(model, tokenizer)``; ``first``: this process
  writes what the node's processes share in ``work_dir``
- ``tokenize(flags, data, tokenizer)``: the ``(train, eval)`` sets
- ``training_arguments(flags, output_dir)``: transformers' ``TrainingArguments``
- ``evaluate``: ``compute_metrics`` over class ids (the argmax of the logits), the metric named
- ``export(flags, model, tokenizer, model_dir, staging)``: the model into the local ``model_dir``

Of the flags it reads ``shared``, ``distributed.local_dir``, ``distributed.nproc_per_node``,
``training.precision`` and ``training.torch_compile``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile

import datasets
import torch
import torch.distributed as dist
from transformers import set_seed
from transformers.utils import logging as hf_logging

from vertex_trainer_runtime import cli, preemption
from vertex_trainer_runtime.context import RunContext
from vertex_trainer_runtime.torch import distributed

logger = logging.getLogger(__name__)


def run(flags, ctx: RunContext) -> int:
    """Train on this replica: in this process, or in torchrun workers when there are several.

    The workers get this process's command line plus the node's work dir and ``worker_flags``.
    """
    if flags.training.precision == "fp16" and not torch.cuda.is_available():
        raise cli.InputError("--precision=fp16 needs a GPU")
    _plain_logs()
    for directory in (ctx.model_dir, ctx.checkpoint_dir):
        directory.local()  # fails now, not after training, when gs:// has no /gcs/ mount
    local_dir = flags.distributed.local_dir
    if distributed.is_worker():
        work_dir = local_dir or _torchrun_scratch()
        return distributed.run_worker(lambda: train(flags, ctx, work_dir))
    job = distributed.plan(ctx.cluster, flags.distributed.nproc_per_node)
    if job.world_size == 1:
        with _scratch(local_dir) as work_dir:
            return train(flags, ctx, work_dir)
    # Check the data once before starting processes (this also downloads it once per node).
    raw = ctx.spec.function("make_data")(flags)
    with _scratch(local_dir) as work_dir:
        extra = [f"--local-dir={work_dir}"]
        if ctx.spec.worker_flags is not None:
            extra += ctx.spec.function("worker_flags")(flags, raw, work_dir)
        return distributed.launch(job, distributed.worker_argv(extra), module="trainer.task")


def _plain_logs() -> None:
    """One line per message in the root logger's format (Cloud Logging: an entry per line)."""
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()


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


def class_ids(logits, labels):
    """Keep only class ids for evaluation, not every logit of a large eval set."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _load(flags, ctx: RunContext, training_args, work_dir: str):
    """(model, tokenizer, train set, eval set): the local main process downloads and
    tokenizes first, the node's other processes reuse its caches."""
    spec = ctx.spec
    with training_args.main_process_first(local=True, desc="data and model"):
        raw = spec.function("make_data")(flags)
        first = training_args.local_process_index == 0
        model, tokenizer = spec.function("make_model")(flags, raw, work_dir, first)
        train_set, eval_set = spec.function("tokenize")(flags, raw, tokenizer)
    return model, tokenizer, train_set, eval_set


def _trainer(flags, ctx, training_args, parts, callbacks, board):
    """The Hugging Face ``Trainer`` with ``callbacks``, then the progress and speed logs and
    TensorBoard in ``board`` (an ``OutputDir``, or None), and this trainer's batches."""
    from vertex_trainer_runtime.torch import batches, reporting, throughput

    model, tokenizer, train_set, eval_set = parts
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
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=tokenizer,
        data_collator=batches.PaddingCollator(tokenizer, pad_to_multiple_of=multiple),
        compute_metrics=ctx.spec.function("evaluate"),
        preprocess_logits_for_metrics=class_ids,
        callbacks=callbacks,
        throughput=speed,
    )


def _log_start(training_args, ctx: RunContext) -> None:
    logger.info(
        "Processes: %d (%s); outputs: model %s, checkpoints %s, logs %s",
        training_args.world_size,
        training_args.device,
        ctx.model_dir,
        ctx.checkpoint_dir,
        ctx.tensorboard_dir,
    )


def train(flags, ctx: RunContext, work_dir: str) -> int:
    """Train in this process (one of torchrun's, or the only one), report, export on rank 0."""
    # Imported here: they import transformers' Trainer (seconds), which a replica that only
    # launches torchrun workers never uses.
    from vertex_trainer_runtime import tracking
    from vertex_trainer_runtime.torch import preemption_hook, reporting

    # SIGTERM saves at an agreed step once training began (MirrorCheckpoints.on_train_begin
    # installs the handler, before data loader workers fork); until then it ends the process.
    notice = preemption.Notice()
    # Data loader workers fork after the fast tokenizer ran; its threads must not be inherited.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    checkpoint_dir = ctx.checkpoint_dir.local()
    output_dir = os.path.join(work_dir, "output")
    training_args = ctx.spec.function("training_arguments")(flags, output_dir)
    is_rank0 = training_args.process_index == 0
    if is_rank0:
        _log_start(training_args, ctx)
    set_seed(flags.shared.seed)
    parts = _load(flags, ctx, training_args, work_dir)
    resume_from = restore(checkpoint_dir, work_dir, training_args)

    # job.experiment: the chief's rank 0 logs to the job's Experiment run.
    tracker = tracking.start(flags, is_rank0 and ctx.cluster.is_chief, ctx.cluster.trial)
    reporter = ctx.metric_reporter(ctx.spec.metric, enabled=is_rank0)
    report = reporting.ReportMetric(reporter, tracker)
    callbacks = [report, *_checkpointing(flags, checkpoint_dir, notice)]
    board = ctx.tensorboard_dir if is_rank0 else None
    trainer = _trainer(flags, ctx, training_args, parts, callbacks, board)
    preemption_hook.fit(trainer, notice, resume_from)
    reporting.report_final_model(trainer, report)
    if is_rank0:
        _export(flags, ctx, trainer, parts[1], work_dir)
        _finish(ctx, trainer, tracker, report)
    if dist.is_available() and dist.is_initialized():  # only in torchrun workers
        dist.barrier()  # every rank is past the export
        distributed.end_worker(0)
    return 0


def _checkpointing(flags, checkpoint_dir: str, notice: preemption.Notice) -> list:
    """The checkpoint mirror (every ``--checkpoint-minutes`` and at a notice), then with
    ``--torch-compile`` the compile cache: a restart reuses the graphs compiled before it."""
    from vertex_trainer_runtime.torch import checkpoint_mirror, compile_cache

    minutes, keep = flags.shared.checkpoint_minutes, checkpoint_mirror.KEEP_CHECKPOINTS
    callbacks = [checkpoint_mirror.MirrorCheckpoints(checkpoint_dir, minutes, keep, notice)]
    if flags.training.torch_compile:
        callbacks.append(compile_cache.CompileCache(checkpoint_dir))
    return callbacks


def restore(checkpoint_dir: str, work_dir: str, training_args) -> str | None:
    """The local copy of the checkpoint every node agreed on, for ``resume_from_checkpoint``
    (None: start afresh). Every rank calls it; one per node reads the checkpoint dir."""
    from vertex_trainer_runtime.torch import checkpoint_mirror

    path = checkpoint_mirror.restore_agreed(
        checkpoint_dir,
        os.path.join(work_dir, "resume"),
        looks=training_args.local_process_index == 0,
        device=training_args.device,
    )
    if path and training_args.process_index == 0:
        logger.info("Resuming from %s", os.path.basename(path))
    return path


def _export(flags, ctx: RunContext, trainer, tokenizer, work_dir: str) -> None:
    staging = os.path.join(work_dir, "export")
    ctx.spec.function("export")(flags, trainer.model, tokenizer, ctx.model_dir.local(), staging)


def _finish(ctx: RunContext, trainer, tracker, report) -> None:
    """The time spent and the goodput logged; the Experiment run gets the exported model's
    metric (``report_final_model``), the time spent and the last speed."""
    from vertex_trainer_runtime.torch import reporting

    speed = trainer.throughput.summary()
    reporting.log_time_spent(speed)
    if ctx.cluster.is_chief:
        reporting.write_goodput(ctx.tensorboard_dir, trainer.state.global_step)
    tracker.finish({ctx.spec.metric: report.last_value, **speed})
