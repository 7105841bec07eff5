"""A preemption notice (SIGTERM) at the awkward moments: during an evaluation between training
steps, and while a checkpoint is being written. Each run is stopped in-process by a real
SIGTERM, twice (a second one changes nothing); then resumed, it must end with the weights of a
run that was never stopped. The runtime's parts of it are tested with the runtime
(vertex-trainer-runtime/tests/test_torch_*.py)."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import base_args, isolate
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.preemption import EXIT_CODE
from vertex_trainer_runtime.torch.checkpoint_mirror import MirrorCheckpoints
from vertex_trainer_tools.testing import read_metrics

from trainer import task

STEPS = 6


def _argv(tiny_bert, csv_data, job) -> list[str]:
    # 64 rows / 16 = 4 steps an epoch; 64 eval rows / 32 = 2 evaluation batches.
    return [
        *base_args(tiny_bert, csv_data, job),
        "--max-train-samples=64",
        "--max-eval-samples=64",
        f"--max-steps={STEPS}",
        "--eval-steps=2",
        "--save-steps=4",
        "--checkpoint-minutes=0",
    ]


def _weights(job):
    from safetensors.torch import load_file

    return load_file(str(job / "model" / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, csv_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    job = folder / "job"
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as patch:  # what the autouse _isolated does per test
        isolate(patch, folder)
        try:
            assert task.main(_argv(tiny_bert, csv_data, job)) == 0
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _weights(job)


def _sigterm_twice():
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.xdist_group("pytorch-notice-uninterrupted")  # one worker, one uninterrupted run
@pytest.mark.parametrize("moment", ["evaluation", "checkpoint write"])
def test_a_notice_saves_a_complete_step_and_the_rerun_ends_as_if_never_stopped(
    moment, tiny_bert, csv_data, tmp_path, monkeypatch, uninterrupted
):
    # The first evaluation batch of the evaluation at step 2 (between training steps), or after
    # the Trainer wrote checkpoint-4 locally, before it is published with its marker.
    name = "on_prediction_step" if moment == "evaluation" else "on_save"
    original, sent_at = getattr(MirrorCheckpoints, name), []

    def hook(self, args, state, control, **kwargs):
        if not sent_at and (self.training or name == "on_save"):
            sent_at.append(state.global_step)
            _sigterm_twice()
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(MirrorCheckpoints, name, hook)
    previous = signal.getsignal(signal.SIGTERM)  # the trainer's handler stays: restore it
    job = tmp_path / "job"
    argv = _argv(tiny_bert, csv_data, job)
    try:
        assert task.main(argv) == EXIT_CODE
    finally:
        signal.signal(signal.SIGTERM, previous)
    noticed = sent_at[0]
    saved = checkpoints.latest_complete(str(job / "checkpoints")).step
    if moment == "evaluation":
        # The evaluation stopped at once: its step saved, no accuracy reported for it.
        assert saved == noticed == 2
        assert 2 not in [int(r["global_step"]) for r in read_metrics(_metrics_file())]
    else:
        # The checkpoint being written is completed, and the notice saves the next step.
        assert noticed == 4
        assert checkpoints.problem(_checkpoint(job, 4)) is None
        assert saved == 5
    assert not (job / "model").exists()

    monkeypatch.setattr(MirrorCheckpoints, name, original)
    try:
        assert task.main(argv) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    weights = _weights(job)
    assert max((weights[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) == 0.0


def _metrics_file() -> str:
    return os.environ["CLOUD_ML_HP_METRIC_FILE"]


def _checkpoint(job, step: int) -> checkpoints.Checkpoint:
    found = [c for c in checkpoints.list_checkpoints(str(job / "checkpoints")) if c.step == step]
    assert found, f"no checkpoint-{step}"
    return found[0]
