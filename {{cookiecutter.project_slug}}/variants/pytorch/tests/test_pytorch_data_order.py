"""Data order: each epoch trains on every example once, and a resumed run is the same run.

The end-to-end tests trace what each training step trained on: a ``sitecustomize`` module on
the trainer's ``PYTHONPATH`` (so it also loads in the torchrun workers) wraps
``Trainer.training_step`` to write each batch's token ids to a file per process; the test maps
them back to the rows of its CSV file. The same module can end every process right after the
checkpoint of a given step is published, as a preemption would, without a race on the timing.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from conftest import MAX_SEQ_LENGTH, PROJECT, base_args, reviews, write_csv
from vertex_trainer_runtime import checkpoints
from vertex_trainer_tools.trainer_runs import run_replicas

TRAIN_ROWS = 101  # odd: no batch size or replica count divides it
BATCH_SIZE = 8
EPOCHS = 2

SITECUSTOMIZE = '''
"""Test hooks of test_pytorch_data_order.py: trace training batches, stop after a checkpoint."""
import json
import os

import transformers

_training_step = transformers.Trainer.training_step


def _traced_training_step(self, model, inputs, *args, **kwargs):
    masks = inputs["attention_mask"].bool()
    rows = [ids[mask].tolist() for ids, mask in zip(inputs["input_ids"], masks)]
    name = f"rank{self.args.process_index}-pid{os.getpid()}.jsonl"
    with open(os.path.join(os.environ["TRACE_DIR"], name), "a") as handle:
        handle.write(json.dumps({"step": self.state.global_step, "rows": rows}) + "\\n")
    return _training_step(self, model, inputs, *args, **kwargs)


transformers.Trainer.training_step = _traced_training_step

if os.environ.get("STOP_AFTER_CHECKPOINT"):
    import torch.distributed as dist

    from vertex_trainer_runtime.torch.checkpoint_mirror import MirrorCheckpoints

    _on_save = MirrorCheckpoints.on_save

    def _on_save_then_stop(self, args, state, control, **kwargs):
        result = _on_save(self, args, state, control, **kwargs)
        if state.global_step == int(os.environ["STOP_AFTER_CHECKPOINT"]):
            if state.is_world_process_zero:
                self.publisher.wait()  # published in the background: complete before the end
            if dist.is_available() and dist.is_initialized():
                dist.barrier()  # rank 0 has published the checkpoint with its marker
            os._exit(137)
        return result

    MirrorCheckpoints.on_save = _on_save_then_stop
'''


@pytest.fixture(scope="module")
def odd_csv(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("odd")
    return {
        "train": write_csv(folder / "train.csv", reviews(TRAIN_ROWS, seed=11)),
        "eval": write_csv(folder / "eval.csv", reviews(32, seed=12)),
    }


def _example_ids(tiny_bert: str, train_csv: str) -> dict[tuple, int]:
    """Each training row's token ids (as the trainer tokenizes them) -> its row number."""
    import csv

    from transformers import AutoTokenizer

    with open(train_csv, newline="", encoding="utf-8") as handle:
        texts = [row["review"] for row in csv.DictReader(handle)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
    ids = {tuple(tokens): row for row, tokens in enumerate(encoded)}
    assert len(ids) == TRAIN_ROWS, "the test needs distinct rows"
    return ids


def _trace(folder) -> dict[int, list[tuple]]:
    """Training step -> the token ids of every example trained in it, over all ranks."""
    steps = collections.defaultdict(list)
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            steps[record["step"]].extend(tuple(row) for row in record["rows"])
    return steps


@pytest.fixture
def run(tmp_path, sitecustomize):
    """``run(argv, name, replicas, **env)``: the trainer as ``replicas`` Vertex replicas (one
    process each), its steps traced to ``tmp_path/name``; their logs. Stopped after a
    checkpoint, every replica must fail."""

    def run(argv, name: str, replicas: int, **env) -> list[str]:
        (tmp_path / name).mkdir()
        trace = str(tmp_path / name)
        env = sitecustomize(SITECUSTOMIZE, TRACE_DIR=trace, OMP_NUM_THREADS="1", **env)
        exit_code = None if "STOP_AFTER_CHECKPOINT" in env else 0
        project = Path(PROJECT)
        return run_replicas(project, tmp_path, argv, name, replicas, exit_code, env, timeout=300)

    return run


def _args(tiny_bert, odd_csv, job, *extra) -> list[str]:
    return [
        *base_args(tiny_bert, odd_csv, job),
        f"--epochs={EPOCHS}",
        f"--batch-size={BATCH_SIZE}",
        "--logging-steps=50",
        "--checkpoint-minutes=0",
        *extra,
    ]


def _steps_per_epoch(replicas: int, accumulation: int = 1) -> int:
    """Optimizer steps per epoch: the last one takes the batches that are left over."""
    batches = -(-TRAIN_ROWS // (BATCH_SIZE * replicas))
    return -(-batches // accumulation)


def _stop_step(replicas: int, accumulation: int) -> int:
    """The resume tests' stop: right after the checkpoint of a step in the middle of epoch 2."""
    per_epoch = _steps_per_epoch(replicas, accumulation)
    return per_epoch + per_epoch // 2


def _assert_every_example_once_per_epoch(tiny_bert, odd_csv, trace_dir) -> None:
    """2 ranks: every row once per epoch; the last step is filled up with at most global batch
    - 1 rows from the start of the epoch's order (accelerate's even batches), never more."""
    ids = _example_ids(tiny_bert, odd_csv["train"])
    per_epoch = _steps_per_epoch(2)
    padding = per_epoch * BATCH_SIZE * 2 - TRAIN_ROWS
    assert 0 < padding < BATCH_SIZE * 2
    trace = _trace(trace_dir)
    assert sorted(trace) == list(range(EPOCHS * per_epoch))
    for epoch in range(EPOCHS):
        rows = [ids[tokens] for s in range(per_epoch) for tokens in trace[epoch * per_epoch + s]]
        counts = collections.Counter(rows)
        never = TRAIN_ROWS - len(counts)
        repeats = sum(count - 1 for count in counts.values())
        summary = f"{len(counts)} distinct, {never} never seen, {repeats} repeats"
        assert never == 0 and repeats == padding, f"epoch {epoch + 1}: {summary}"


@pytest.mark.slow
@pytest.mark.distributed
def test_two_torchrun_workers_without_grouping_train_on_every_example_once_per_epoch(
    tiny_bert, odd_csv, tmp_path, run
):
    """--no-group-by-length on 2 torchrun workers of one replica, which must get the flag (each
    saved the TrainingArguments it trained with). With the default --group-by-length on 2
    replicas: the 2-replica run never stopped of the resume test below."""
    import torch

    argv = _args(tiny_bert, odd_csv, tmp_path / "job", "--no-group-by-length", "--nproc-per-node=2")
    assert "Processes: 2" in run(argv, "run", replicas=1)[0]
    latest = checkpoints.latest_complete(str(tmp_path / "job" / "checkpoints"))
    worker_args = torch.load(f"{latest.path}/training_args.bin", weights_only=False)
    assert worker_args.world_size == 2
    assert getattr(worker_args, "train_sampling_strategy", "random") != "group_by_length"
    assert not getattr(worker_args, "group_by_length", False)
    _assert_every_example_once_per_epoch(tiny_bert, odd_csv, tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("replicas", "accumulation"),
    [(1, 1), pytest.param(2, 1, marks=pytest.mark.distributed), (1, 3)],
    ids=["1-replica", "2-replicas", "1-replica-accumulating-3"],
)
def test_resumed_mid_epoch_ends_with_the_same_weights(
    tiny_bert, odd_csv, tmp_path, run, replicas, accumulation
):
    """Stopped right after a checkpoint in the middle of epoch 2, rerun: the rerun trains the
    rest of epoch 2 on the same batches, and the final weights are bitwise those of a run that
    was never stopped (CPU, gloo: the same operations in the same order). With
    --gradient-accumulation-steps a step is several batches (13 per epoch here, in steps of 3:
    the last step of each epoch takes the one left over); the rerun skips whole steps' batches.
    On 2 replicas the run never stopped (the default --group-by-length) also trains on every
    example once per epoch."""
    from safetensors.torch import load_file

    per_epoch = _steps_per_epoch(replicas, accumulation)
    stop = _stop_step(replicas, accumulation)
    assert per_epoch < stop < EPOCHS * per_epoch
    save = [f"--save-steps={stop}", f"--gradient-accumulation-steps={accumulation}"]
    whole = tmp_path / "whole"
    run(_args(tiny_bert, odd_csv, whole, *save), "whole", replicas)
    if replicas == 2:
        _assert_every_example_once_per_epoch(tiny_bert, odd_csv, whole)
    job = tmp_path / "job"
    argv = _args(tiny_bert, odd_csv, job, *save)
    run(argv, "stopped", replicas, STOP_AFTER_CHECKPOINT=str(stop))
    assert not (job / "model").exists()
    logs = run(argv, "resumed", replicas)
    assert f"Resuming from checkpoint-{stop}" in logs[0]
    assert f"Training from global step {stop} to {EPOCHS * per_epoch}" in logs[0]

    reference, resumed = _trace(whole), _trace(tmp_path / "resumed")
    assert min(resumed) == stop
    global_batch = BATCH_SIZE * replicas * accumulation
    assert len(reference[0]) == min(global_batch, TRAIN_ROWS), "a step is accumulation batches"
    changed = [s for s in resumed if sorted(resumed[s]) != sorted(reference[s])]
    assert changed == [], f"steps that trained on other examples after the resume: {changed}"

    expected = load_file(str(whole / "model" / "model.safetensors"))
    weights = load_file(str(job / "model" / "model.safetensors"))
    assert weights.keys() == expected.keys()
    largest = max((weights[k] - expected[k]).abs().max().item() for k in weights)
    assert largest == 0.0, f"max |dW| {largest:.3g}"
