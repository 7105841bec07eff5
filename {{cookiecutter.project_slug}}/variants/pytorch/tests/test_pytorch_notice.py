"""A preemption notice (SIGTERM) at the awkward moments: during an evaluation between training
steps, and while a checkpoint is being written (each run is stopped in-process by a real
SIGTERM, twice: a second one changes nothing; then resumed, it must end with the weights of a
run that was never stopped); the launcher's forwarding of SIGTERM; a worker whose chief is gone."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import base_args
from vertex_trainer_runtime import checkpoints
from vertex_trainer_runtime.preemption import EXIT_CODE
from vertex_trainer_tools.testing import read_metrics

from trainer import resume, task

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


def test_the_flags_of_one_process_are_its_own():
    from trainer import preemption_hook

    flags = preemption_hook.Flags()
    flags.open()  # no process group: nothing to open
    assert flags.agreed() is None and not flags.pending
    flags.share(True, False)
    assert flags.pending and flags.agreed() == [True, False]
    assert flags.agreed() is None


def test_a_notice_at_a_step_end_saves_that_step_and_the_last_step_saves_before_evaluating():
    from transformers import TrainerControl, TrainerState
    from vertex_trainer_runtime import preemption

    notice = preemption.Notice()
    mirror = resume.MirrorCheckpoints("unused", minutes=0, notice=notice)
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
    mirror = resume.MirrorCheckpoints("unused", minutes=0)
    control = TrainerControl(should_evaluate=True)
    mirror.on_step_end(None, TrainerState(global_step=6, max_steps=6), control)
    assert control.should_save and not control.should_evaluate


def test_the_launcher_forwards_sigterm_to_its_workers_and_nothing_more():
    import subprocess
    import sys

    from trainer import distributed

    others = []
    forward = distributed._ForwardSigterm(lambda signum, frame: others.append(signum))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in distributed._children()
        assert forward(signal.SIGTERM, None) is None  # no exception: torchrun keeps watching
        assert child.wait(timeout=30) == -signal.SIGTERM
        forward(signal.SIGINT, None)
        assert others == [signal.SIGINT] and forward.forwarded == 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, csv_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    job = folder / "job"
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as patch:  # what the autouse _isolated does per test
        patch.setenv("HF_DATASETS_CACHE", str(folder / "hf-datasets"))
        patch.setenv("CLOUD_ML_HP_METRIC_FILE", str(folder / "hypertune" / "metrics.json"))
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
    sent_at = []
    if moment == "evaluation":
        # The first evaluation batch of the evaluation at step 2 (between training steps).
        original = resume.MirrorCheckpoints.on_prediction_step

        def hook(self, args, state, control, **kwargs):
            if self.training and not sent_at:
                sent_at.append(state.global_step)
                _sigterm_twice()
            return original(self, args, state, control, **kwargs)

        monkeypatch.setattr(resume.MirrorCheckpoints, "on_prediction_step", hook)
    else:
        # After the Trainer wrote checkpoint-4 locally, before it is published with its marker.
        original = resume.MirrorCheckpoints.on_save

        def hook(self, args, state, control, **kwargs):
            if not sent_at:
                sent_at.append(state.global_step)
                _sigterm_twice()
            return original(self, args, state, control, **kwargs)

        monkeypatch.setattr(resume.MirrorCheckpoints, "on_save", hook)
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

    name = "on_prediction_step" if moment == "evaluation" else "on_save"
    monkeypatch.setattr(resume.MirrorCheckpoints, name, original)
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


STORE = """
import sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
time.sleep(600)
"""

WATCH = """
import logging, sys, time
from trainer import distributed
logging.basicConfig(level=logging.INFO)
address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": sys.argv[1]}
distributed.watch_chief({**address, "TORCHELASTIC_USE_AGENT_STORE": "True"})
print("watching", flush=True)
time.sleep(300)
print("still running", flush=True)
"""


@pytest.mark.slow
def test_a_worker_exits_once_the_chiefs_store_stops_answering(tmp_path):
    """The chief's VM vanishes without closing its connections (here: its store process is
    stopped): the worker's watch sees no answer and ends the worker, well within 30 s."""
    import subprocess
    import sys
    import time

    from conftest import PROJECT, trainer_env

    from trainer import distributed

    store = subprocess.Popen(
        [sys.executable, "-c", STORE], cwd=PROJECT, env=trainer_env(), stdout=subprocess.PIPE
    )
    worker = None
    try:
        port = store.stdout.readline().decode().strip()
        log = open(tmp_path / "worker.log", "w+b")  # noqa: SIM115 - read below
        worker = subprocess.Popen(
            [sys.executable, "-c", WATCH, port],
            cwd=PROJECT,
            env=trainer_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while b"watching" not in (tmp_path / "worker.log").read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log.read()
            time.sleep(0.1)
        time.sleep(distributed.CHIEF_CHECK_SECONDS)  # at least one answered check
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        store.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        code = worker.wait(timeout=120)
        seconds = time.monotonic() - stopped
        output = (tmp_path / "worker.log").read_text()
        print(f"pytorch worker without an answering chief: exit {code} {seconds:.1f} s later")
        assert code == 1 and "the chief is gone" in output, output
        limit = distributed.CHIEF_CHECK_SECONDS + distributed.CHIEF_TIMEOUT_SECONDS
        assert seconds < min(30, limit + 5), output
    finally:
        for process in (worker, store):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        store.send_signal(signal.SIGCONT) if store.poll() is None else None
