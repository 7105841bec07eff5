"""vertex_trainer_runtime.torch.preemption_hook: the flags ranks share each step, and a notice
(SIGTERM) at the awkward moments of a tiny Hugging Face ``Trainer``'s run: during an evaluation
between training steps, and while a checkpoint is being written. Each run is stopped in-process
by a real SIGTERM, twice (a second one changes nothing); then resumed, it must end with the
weights of a run that was never stopped."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from vertex_trainer_runtime import checkpoints, preemption  # noqa: E402
from vertex_trainer_runtime.torch import checkpoint_mirror, preemption_hook  # noqa: E402
from vertex_trainer_runtime.torch.checkpoint_mirror import MirrorCheckpoints  # noqa: E402

STEPS = 6


def test_the_flags_of_one_process_are_its_own():
    flags = preemption_hook.Flags()
    flags.open()  # no process group: nothing to open
    assert flags.agreed() is None and not flags.pending
    flags.share(True, False)
    assert flags.pending and flags.agreed() == [True, False]
    assert flags.agreed() is None


def _rows(count: int, seed: int) -> list[dict]:
    """Token ids whose first token gives the label."""
    ids = torch.randint(1, 50, (count, 8), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": row, "labels": int(row[0] > 25)} for row in ids]


class _Evaluations(TrainerCallback):
    """Appends the step of each evaluation that ended to ``steps``."""

    def __init__(self, steps: list[int]):
        self.steps = steps

    def on_evaluate(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def _attempt(job, evaluated: list[int] | None = None) -> dict:
    """One attempt of the job in ``job``, as a trainer runs it: restore the newest complete
    checkpoint, train 6 steps of 16 rows (an evaluation of 2 batches every 2 steps, a checkpoint
    every 4) with ``MirrorCheckpoints``; the final weights (``evaluated``: the steps of the
    evaluations that ended). Raises
    ``Preempted`` once a notice's checkpoint is saved."""
    set_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    args = TrainingArguments(
        output_dir=str(job / "output"),
        max_steps=STEPS,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        eval_strategy="steps",
        eval_steps=2,
        save_steps=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    notice = preemption.Notice()
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=args,
        train_dataset=_rows(64, seed=1),
        eval_dataset=_rows(64, seed=2),
        callbacks=[
            MirrorCheckpoints(str(job / "checkpoints"), 0, notice=notice),
            _Evaluations([] if evaluated is None else evaluated),
        ],
    )
    resume_from = checkpoint_mirror.restore_agreed(
        str(job / "checkpoints"), str(job / "resume"), looks=True
    )
    previous = signal.getsignal(signal.SIGTERM)
    try:
        preemption_hook.fit(trainer, notice, resume_from)
    finally:
        signal.signal(signal.SIGTERM, previous)
    weights = {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}
    return weights


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return _attempt(tmp_path_factory.mktemp("uninterrupted"))


def _sigterm_twice():
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("moment", ["evaluation", "checkpoint write"])
def test_a_notice_saves_a_complete_step_and_the_rerun_ends_as_if_never_stopped(
    moment, tmp_path, monkeypatch, uninterrupted
):
    # The first evaluation batch of the evaluation at step 2 (between training steps), or after
    # the Trainer wrote checkpoint-4 locally, before it is published with its marker.
    name = "on_prediction_step" if moment == "evaluation" else "on_save"
    original, sent_at, evaluated = getattr(MirrorCheckpoints, name), [], []

    def hook(self, args, state, control, **kwargs):
        if not sent_at and (self.training or name == "on_save"):
            sent_at.append(state.global_step)
            _sigterm_twice()
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(MirrorCheckpoints, name, hook)
    with pytest.raises(preemption.Preempted):
        _attempt(tmp_path, evaluated)
    noticed = sent_at[0]
    saved = checkpoints.latest_complete(str(tmp_path / "checkpoints")).step
    if moment == "evaluation":
        # The evaluation stopped at once: its step saved, not reported as evaluated.
        assert saved == noticed == 2
        assert 2 not in evaluated
    else:
        # The checkpoint being written is completed, and the notice saves the next step.
        assert noticed == 4
        found = checkpoints.list_checkpoints(str(tmp_path / "checkpoints"))
        assert [checkpoints.problem(c) for c in found if c.step == 4] == [None]
        assert saved == 5

    monkeypatch.setattr(MirrorCheckpoints, name, original)
    weights = _attempt(tmp_path)
    assert max((weights[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) == 0.0
