"""Each test starts without a job ledger: one that a test's ``context.build`` opened would
otherwise record later tests' steps and add its goodput to their Experiment runs."""

from __future__ import annotations

import pytest

from vertex_trainer_runtime import ledger


@pytest.fixture(autouse=True)
def no_job_ledger(monkeypatch):
    monkeypatch.setattr(ledger, "_current", ledger._Off())
