"""vertex_trainer_runtime.torch.checkpoint_mirror: what a Hugging Face checkpoint must hold to
be resumed from, when the mirror asks the Trainer to save, and how nodes agree on one step."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState  # noqa: E402

from vertex_trainer_runtime import checkpoints, preemption  # noqa: E402
from vertex_trainer_runtime.torch import checkpoint_mirror  # noqa: E402


def _fake_checkpoint(folder) -> str:
    """The files Trainer writes, tiny: state, weights, optimizer and scheduler."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4, "log_history": []}))
    save_file({"weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": 4}, folder / "scheduler.pt")
    return str(folder)


def test_validate_rejects_what_would_crash_or_silently_reset_a_resume(tmp_path):
    checkpoint_mirror.validate(_fake_checkpoint(tmp_path / "good"))  # does not raise

    no_optimizer = _fake_checkpoint(tmp_path / "no-optimizer")
    os.remove(os.path.join(no_optimizer, "optimizer.pt"))
    truncated_state = _fake_checkpoint(tmp_path / "truncated-state")
    with open(os.path.join(truncated_state, "trainer_state.json"), "r+", encoding="utf-8") as f:
        f.truncate(10)
    truncated_weights = _fake_checkpoint(tmp_path / "truncated-weights")
    path = os.path.join(truncated_weights, "model.safetensors")
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 4)
    for broken in (no_optimizer, truncated_state, truncated_weights):
        try:
            checkpoint_mirror.validate(broken)
        except Exception:  # noqa: BLE001 - any error is a rejection
            continue
        raise AssertionError(f"{broken} passed validation")


def test_checkpoint_minutes_request_a_save(tmp_path):
    now = [0.0]
    mirror = checkpoint_mirror.MirrorCheckpoints(str(tmp_path), minutes=1)
    mirror.interval = checkpoints.Interval(1, clock=lambda: now[0])
    control, state = TrainerControl(), TrainerState(global_step=3)
    mirror.on_step_end(None, state, control)
    assert not control.should_save
    now[0] = 61.0
    mirror.on_step_end(None, state, control)
    assert control.should_save


def test_a_notice_at_a_step_end_saves_that_step_and_the_last_step_saves_before_evaluating():
    notice = preemption.Notice()
    mirror = checkpoint_mirror.MirrorCheckpoints("unused", minutes=0, notice=notice)
    state = TrainerState(global_step=3, max_steps=6)
    control = TrainerControl(should_evaluate=True)
    mirror.on_step_end(None, state, control)
    assert not control.should_save and control.should_evaluate  # no notice yet
    notice.handle()
    control = TrainerControl(should_evaluate=True)
    mirror.on_step_end(None, state, control)
    assert control.should_save and control.should_training_stop and not control.should_evaluate
    assert mirror.noticed_in == 3 and notice.stopping

    # The final step: saved first, evaluated after training (report_final_model).
    mirror = checkpoint_mirror.MirrorCheckpoints("unused", minutes=0)
    control = TrainerControl(should_evaluate=True)
    mirror.on_step_end(None, TrainerState(global_step=6, max_steps=6), control)
    assert control.should_save and not control.should_evaluate


AGREE = """
import json, sys
import torch.distributed as dist
from vertex_trainer_runtime.torch import checkpoint_mirror
dist.init_process_group("gloo")
for root in sys.argv[1:]:
    step, found = checkpoint_mirror.agreed_checkpoint(root)
    print(json.dumps({"step": step, "path": found and found.path}))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _agree(*cases) -> list[list[dict]]:
    """What ``agreed_checkpoint`` returns on each of two gloo ranks, one root each, for each case
    (a pair of roots): both processes, started once, answer every case in turn."""
    address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", AGREE, *(str(roots[rank]) for roots in cases)],
            env={**os.environ, **address, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        answers.append([json.loads(line) for line in out.strip().splitlines()[-len(cases) :]])
    return [[answers[rank][case] for rank in range(2)] for case in range(len(cases))]


def test_nodes_agree_on_one_checkpoint_when_their_newest_differ(tmp_path):
    """Node 1 does not see step 8 complete yet (or at all): both resume from step 4."""
    node0, node1, empty = tmp_path / "node0", tmp_path / "node1", tmp_path / "empty"
    for root, complete in ((node0, (4, 8)), (node1, (4,))):
        for step in (4, 8):
            folder = _fake_checkpoint(root / f"checkpoint-{step}")
            if step in complete:
                checkpoints.mark_complete(folder, step)
    os.makedirs(empty)

    results, without_one = _agree([node0, node1], [node0, empty])
    assert [r["step"] for r in results] == [4, 4]
    assert results[0]["path"] == str(node0 / "checkpoint-4")
    assert results[1]["path"] == str(node1 / "checkpoint-4")

    # A node with no usable checkpoint at all: every node starts afresh.
    assert [r["step"] for r in without_one] == [-1, -1]
