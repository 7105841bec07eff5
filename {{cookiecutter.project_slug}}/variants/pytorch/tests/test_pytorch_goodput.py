"""The job ledger of a 2-replica PyTorch job through the local emulator: a replica held at its
start is the other replica's wait for its peers in ``make report``. torchrun's agent meets the
other replicas' agents before its workers exist; the launcher hands that rendezvous's time to
its workers' ledger, so it is waiting, not start-up."""

from __future__ import annotations

import pytest
from conftest import base_args
from vertex_trainer_runtime import goodput
from vertex_trainer_tools import report
from vertex_trainer_tools.pytest_plugin import first_attempts, hold_at_start, job_ledger

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

HOLD_S = 12.0
# The worker replica waits this long at its start, before anything else runs in it.
HOLD = hold_at_start(HOLD_S)


def test_a_replica_held_at_its_start_is_the_other_ones_wait(
    tiny_bert, csv_data, tmp_path, local_job, sitecustomize
):
    args = [a for a in base_args(tiny_bert, csv_data, "") if not a.startswith("--job-dir")]
    args += ["--checkpoint-minutes=0", "--max-steps=2"]
    job = local_job(tmp_path / "job", args, replicas=2, env=sitecustomize(HOLD))
    assert job.returncode == 0, job.tail()
    found = job_ledger(job)
    chief, worker = first_attempts(found, "workerpool0-0", "workerpool1-0")
    # Both waits end when the last agent joins; the chief waited for the held worker.
    waits = [attempt.of("peer_wait") for attempt in (chief, worker)]
    assert all(w and w[0]["what"] == "torchrun's rendezvous" for w in waits), waits
    assert abs(waits[0][0]["time"] - waits[1][0]["time"]) < 2, waits
    assert chief.seconds["waiting"] > worker.seconds["waiting"] + HOLD_S / 4, chief.seconds
    assert worker.seconds["startup"] >= HOLD_S, "the held replica's own start-up"
    text = "\n".join(report.lines(str(job.output_dir), found, goodput.summary(found)))
    assert "waiting" in text, text
