"""The job ledger: records kept in memory, written as new small files in batches (at once for a
checkpoint and the exit), never a file per step, and never a corrupt file after a kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from vertex_trainer_runtime import goodput, ledger, runtime, speed


def records(folder) -> list[dict]:
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines()]
    return found


@pytest.fixture
def opened(tmp_path, monkeypatch):
    """This process's ledger, opened as a trainer opens it, then forgotten."""
    monkeypatch.setattr(ledger, "_current", ledger._Off())
    environ = {ledger.SECONDS_ENV: "3600"}
    current = ledger.open_for(str(tmp_path), runtime.Cluster(), environ)
    yield current, tmp_path / ledger.FOLDER
    current.close(0)


def wait_for(folder, event: str, count: int = 1) -> list[dict]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        written = records(folder)
        if sum(r["event"] == event for r in written) >= count:
            return written
        time.sleep(0.02)
    raise AssertionError(f"no {event} written")


def test_steps_and_pauses_wait_for_the_batch_a_checkpoint_does_not(opened):
    current, folder = opened
    timer = speed.IntervalTimer()
    timer.start(0)
    wait_for(folder, "step_start_time")  # urgent: written at once
    files = len(list(folder.glob("*.jsonl")))
    for step in range(1, 101):
        current.step = step  # what a trainer does per step: an attribute, no I/O
        if step % 10 == 0:
            timer.lap(step)
    with timer.timing("evaluation"):
        pass
    time.sleep(0.3)
    assert len(list(folder.glob("*.jsonl"))) == files, "steps and pauses wait for the batch"
    with timer.timing("checkpoint"):
        pass
    written = wait_for(folder, "pause", 2)  # a checkpoint's pause is urgent: all of it goes
    ranges = [r for r in written if r["event"] == "steps"]
    assert [(r["first_step"], r["last_step"]) for r in ranges] == [
        (n + 1, n + 10) for n in range(0, 100, 10)
    ]
    assert {r["kind"] for r in written if r["event"] == "pause"} == {"evaluation", "checkpoint"}
    assert any(r["event"] == "progress" and r["step"] == 100 for r in written)
    assert len(list(folder.glob("*.jsonl"))) == files + 1, "one batch, not a file per step"


def test_close_writes_the_end_and_its_step(opened):
    current, folder = opened
    current.step = 7
    current.close(143, "preempted")
    (end,) = [r for r in records(folder) if r["event"] == "job_end_time"]
    assert (end["exit_code"], end["reason"], end["step"]) == (143, "preempted", 7)


def test_bad_input_before_the_first_step_writes_nothing(opened):
    current, folder = opened
    current.record("peer_wait", seconds=1.0)
    current.flush()
    current.close(2)
    assert not folder.exists(), "a run refused for bad input leaves nothing behind"


@pytest.mark.parametrize(
    "environ",
    [{"LOCAL_RANK": "1"}, {ledger.SECONDS_ENV: "0"}],
    ids=["a torchrun worker but local rank 0", "turned off"],
)
def test_no_ledger_where_none_is_wanted(tmp_path, monkeypatch, environ):
    monkeypatch.setattr(ledger, "_current", ledger._Off())
    assert isinstance(ledger.open_for(str(tmp_path), runtime.Cluster(), environ), ledger._Off)
    ledger.record("steps")  # does nothing
    assert not (tmp_path / ledger.FOLDER).exists()


def test_a_launcher_hands_its_attempt_over(opened, tmp_path):
    current, folder = opened
    environ = ledger.handover()
    assert float(environ[ledger.STARTED_ENV]) == current.started
    worker = ledger.Ledger(str(folder), "workerpool0-0", started=float(environ[ledger.STARTED_ENV]))
    assert worker.attempt == current.attempt, "one attempt of one replica: one lane"


def test_a_launchers_rendezvous_is_its_workers_wait_for_peers(opened, tmp_path, monkeypatch):
    launcher, _ = opened
    environ = {
        **ledger.handover(),
        **ledger.handover_wait(launcher.started + 1, launcher.started + 31),
    }
    monkeypatch.setattr(ledger, "_current", ledger._Off())  # the worker: a process of its own
    worker = ledger.open_for(str(tmp_path / "worker"), runtime.Cluster(), environ)
    (wait,) = [r for r in worker._pending if r["event"] == "peer_wait"]
    assert wait["time"] == launcher.started + 31 and wait["seconds"] == 30.0, wait
    worker.close(2)  # forgotten, nothing written
    damaged = {**environ, ledger.WAITED_ENV: "nan 1"}
    monkeypatch.setattr(ledger, "_current", ledger._Off())
    worker = ledger.open_for(str(tmp_path / "damaged"), runtime.Cluster(), damaged)
    assert not [r for r in worker._pending if r["event"] == "peer_wait"]
    worker.close(2)


WRITER = """
import sys, time
from vertex_trainer_runtime.ledger import Ledger
ledger = Ledger(sys.argv[1], "workerpool0-0", seconds=0.001).open()
ledger.record("step_start_time", step_count=0)
step = 0
while True:
    step += 1
    ledger.steps(step, step, 0.001, note="x" * 500)
    time.sleep(0.0005)
"""


def test_a_kill_9_at_any_moment_leaves_at_most_a_torn_last_line(tmp_path):
    for delay in (0.0, 0.013, 0.029):
        folder = tmp_path / f"killed-{delay}"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(folder)])
        deadline = time.monotonic() + 60
        while len(list(folder.glob("*.jsonl"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # the interpreter's start: seconds on a loaded machine
        time.sleep(delay)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        torn = 0
        for path in folder.glob("*.jsonl"):
            lines = path.read_text().split("\n")
            for number, line in enumerate(lines):
                try:
                    json.loads(line) if line else None
                except ValueError:
                    assert number == len(lines) - 1, f"{path.name}: a bad line not last"
                    torn += 1
        assert torn <= 1
        assert len(list(folder.glob("*.jsonl"))) > 3


def test_the_end_of_a_run_knows_the_jobs_goodput_so_far(opened, caplog):
    current, folder = opened
    timer = speed.IntervalTimer()
    timer.start(0)
    time.sleep(0.05)
    current.step = 10
    timer.lap(10)
    found = ledger.figures()
    assert 0 < found["goodput"] <= 1 and found["attempts"] == 1 and found["lost_steps"] == 0
    assert "goodput" in ledger.describe(found)
    caplog.set_level("INFO")
    current.close(0)
    assert any(r.getMessage().startswith("Job ledger: goodput") for r in caplog.records)


KILLED_AT = """
import os, signal, sys, time
from vertex_trainer_runtime.ledger import Ledger
folder, restored, killed_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ledger = Ledger(folder, "workerpool0-0", seconds=3600).open()  # one batch an hour: no help
ledger.record("step_start_time", step_count=restored)
deadline = time.monotonic() + 30
while not os.path.isdir(folder) or not any(n.endswith(".progress") for n in os.listdir(folder)):
    assert time.monotonic() < deadline, "no progress file"  # made with the first batch
    time.sleep(0.01)
for step in range(restored + 1, killed_at + 1):
    time.sleep(0.002)
    ledger.step = step  # what a trainer does per step
    if step % 10 == 0:
        ledger.steps(step - 9, step, 0.02)
os.kill(os.getpid(), signal.SIGKILL)  # at a step no batch has seen
"""


def test_lost_steps_are_exact_after_a_kill_9_between_batches(tmp_path):
    """Killed at step 57 after resuming from 20, the next attempt resumes from checkpoint 40:
    17 steps are lost, though the last batch written says only the first step."""
    folder = tmp_path / ledger.FOLDER
    killed = subprocess.run([sys.executable, "-c", KILLED_AT, str(folder), "20", "57"])
    assert killed.returncode == -signal.SIGKILL
    assert max(r.get("step", 0) for r in records(folder)) < 57  # the batches do not know
    time.sleep(0.01)
    rerun = ledger.Ledger(str(folder), "workerpool0-0", seconds=3600, started=time.time()).open()
    rerun.record("step_start_time", step_count=40)
    rerun.step = 60
    rerun.close(0)
    found = goodput.read_folder(str(folder))
    goodput.account(found)
    first, second = found.attempts
    assert first.reached == 57 and first.lost_steps == 17
    assert second.lost_steps == 0 and first.ended == "no end record (killed?)"


def test_a_damaged_progress_file_is_ignored(tmp_path):
    folder = tmp_path / ledger.FOLDER
    current = ledger.Ledger(str(folder), "workerpool0-0", seconds=3600).open()
    current.record("step_start_time", step_count=0)
    current.flush()
    current.step = 5
    current.close(0)
    (mark,) = folder.glob("*.progress")
    mark.write_bytes(b"\xff" * 3)
    (attempt,) = goodput.read_folder(str(folder)).attempts
    assert attempt.reached == 5  # from the exit's record
