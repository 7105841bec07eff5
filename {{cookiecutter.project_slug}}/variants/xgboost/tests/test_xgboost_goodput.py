"""The job ledger of an XGBoost job through the local emulator: a replica held at its start is
the other replica's wait for its peers in ``make report`` (the collective waits for every
member), and the report gives rows x rounds per second, saying why MFU does not apply."""

from __future__ import annotations

import pytest
from conftest import FAST
from vertex_trainer_runtime import goodput
from vertex_trainer_tools import report
from vertex_trainer_tools.pytest_plugin import first_attempts, hold_at_start, job_ledger

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ARGS = ["--train-data=synthetic:2000", "--eval-data=synthetic:500", "--num-boost-round=20", *FAST]
HOLD_S = 12.0
# The worker replica waits this long at its start, before anything else runs in it.
HOLD = hold_at_start(HOLD_S)


def test_a_replica_held_at_its_start_is_the_other_ones_wait(tmp_path, local_job, sitecustomize):
    job = local_job(tmp_path / "job", ARGS, replicas=2, env=sitecustomize(HOLD))
    assert job.returncode == 0, job.tail()
    found = job_ledger(job)
    chief, worker = first_attempts(found, "workerpool0-0", "workerpool1-0")
    # Both waits end when the last member joins; the chief waited for the held worker.
    joined = [attempt.of("peer_wait")[0]["time"] for attempt in (chief, worker)]
    assert abs(joined[0] - joined[1]) < 2, joined
    assert chief.seconds["waiting"] > worker.seconds["waiting"] + HOLD_S / 4, chief.seconds
    assert worker.seconds["startup"] >= HOLD_S, "the held replica's own start-up"
    text = "\n".join(report.lines(str(job.output_dir), found, goodput.summary(found)))
    assert "rows x rounds per productive second (MFU does not apply" in text, text
