"""``make report``: a job ledger written by the runtime's own ``Ledger`` (scripted clocks, known
steps) read back into exact figures; a missing, empty or damaged ledger is one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from vertex_trainer_runtime import goodput
from vertex_trainer_runtime.ledger import Ledger

from conftest import PROJECT
from vertex_trainer_tools import report
from vertex_trainer_tools.errors import ToolError


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def attempt(folder: Path, started: float, restored: int, steps: int, killed: bool) -> Ledger:
    """One attempt: 4 s of start-up, a first range of 10 steps with 3 s of compiling, then
    ranges of 10 steps at 1 s a step with a 2 s evaluation each, a checkpoint every 20."""
    clock = Clock(started)
    ledger = Ledger(str(folder), "workerpool0-0", seconds=3600, clock=clock, started=started)
    ledger.record("job_start_time", at=started)
    clock.now += 4
    ledger.record("step_start_time", step_count=restored)
    done = restored
    while done < restored + steps:
        compile_ = 3.0 if done == restored else 0.0
        clock.now += 10 + compile_ + 2
        ledger.record("pause", kind="evaluation", seconds=2.0)
        ledger.steps(done + 1, done + 10, 12.0 + compile_, paused=2.0)
        done += 10
        if done % 20 == 0:
            clock.now += 0.5
            ledger.record("pause", kind="checkpoint", seconds=0.5)
    if not killed:
        clock.now += 1
        ledger.close(0)
    ledger.flush()
    return ledger


@pytest.fixture
def job(tmp_path) -> Path:
    folder = tmp_path / "job" / "checkpoints" / "ledger"
    attempt(folder, 1000.0, restored=0, steps=30, killed=True)  # killed at 30: checkpoint 20
    attempt(folder, 1100.0, restored=20, steps=40, killed=False)
    return tmp_path / "job"


def test_lost_steps_and_the_categories_are_exact(job):
    ledger = report.read_ledger(str(job))
    goodput.account(ledger)
    first, second = ledger.attempts
    assert first.lost_steps == 10, "steps 21-30, computed again from checkpoint 20"
    assert first.seconds["lost"] == pytest.approx(10.0)
    assert first.seconds["compile"] == pytest.approx(3.0)
    assert first.seconds["startup"] == pytest.approx(4.0)
    assert first.seconds["evaluation"] == pytest.approx(6.0)
    assert first.seconds["checkpoint"] == pytest.approx(0.5)
    assert first.seconds["productive"] == pytest.approx(20.0)
    assert first.gap == pytest.approx(1100.0 - first.end)
    assert second.lost_steps == 0 and second.seconds["lost"] == 0
    assert second.seconds["productive"] == pytest.approx(40.0)
    for each in (first, second):
        wall = each.end - each.start
        assert sum(each.seconds.values()) == pytest.approx(wall)
        assert abs(each.seconds["other"]) <= 0.02 * wall, each.seconds
    totals = goodput.summary(ledger)
    assert totals["lost_steps"] == 10
    assert totals["goodput"] == pytest.approx(60.0 / totals["paid_seconds"])


def test_the_report_prints_and_draws(job, tmp_path, capsys):
    config = str(PROJECT / "vertex.yaml")
    args = argparse.Namespace(job=str(job), jobs_root="", png="", config=config)
    assert report.command(args) == 0
    out = capsys.readouterr().out
    assert "Lost work: 10 step(s) computed again" in out and "goodput" in out
    assert (job / "report.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        ("missing", "no job ledger"),
        ("empty", "holds no records"),
        ("garbage", "holds no records"),
    ],
)
def test_a_missing_or_empty_ledger_is_one_line(tmp_path, damage, line):
    folder = tmp_path / "checkpoints" / "ledger"
    if damage != "missing":
        folder.mkdir(parents=True)
        text = "" if damage == "empty" else "{not json\n\x00\x01"
        (folder / "workerpool0-0.1.2.000000.jsonl").write_text(text)
    with pytest.raises(ToolError) as refused:
        report.read_ledger(str(tmp_path))
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_a_torn_or_damaged_line_is_skipped_not_fatal(job):
    batch = next((job / "checkpoints" / "ledger").glob("*.000000.jsonl"))
    damaged = [
        '{"event": "steps", "time": 1e999, "first_step": 1}',
        '{"event": "steps", "time": 1000, "first_step": "x", "last_step": 2, "seconds": 1}',
        "[1, 2]",
        '{"event": "pause", "time": 1001}',
        '{"event": "job_end_time", "time": 1002, "step": "x"}',
    ]
    torn = '{"event": "steps", "time": 12'  # a kill -9 while writing
    batch.write_text(batch.read_text() + "\n".join(damaged) + "\n" + torn)
    ledger = report.read_ledger(str(job))
    assert ledger.skipped_lines == 6
    goodput.account(ledger)
    assert ledger.attempts[0].lost_steps == 10
