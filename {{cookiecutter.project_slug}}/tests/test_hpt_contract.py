"""The tuning study of vertex.yaml and the trainer agree, the way Vertex calls them: a short run
as trial 1 (the emulator appends the study's ``--<id>=<value>`` arguments, DISCRETE values as
floats such as ``32.0``, as Vertex does) takes every argument and reports the study's metric id
through cloudml-hypertune. ``make check`` already refuses a study parameter the trainer has no
flag for; this proves the values parse and the metric arrives."""

from __future__ import annotations

import math

import pytest
from conftest import SMOKE_ARGS
from vertex_trainer_tools import config


@pytest.mark.slow
def test_a_short_trial_reports_the_study_metric(tmp_path, hpt_trial, vertex_project):
    study = config.load(vertex_project / "vertex.yaml").hpt
    job = hpt_trial(tmp_path / "job", SMOKE_ARGS, trial=1)
    assert job.returncode == 0, job.tail()
    assert not any("Ignoring arguments" in line for line in job.lines()), job.tail()
    for parameter in study.parameters:
        assert f"--{parameter.id}=" in job.output, f"trial value of {parameter.id} not passed"
    lines = job.metrics()
    assert lines, "the trial reported nothing to cloudml-hypertune"
    assert all(study.metric_id in line for line in lines), (
        f"reported {sorted(lines[-1])}, the study's metric id is {study.metric_id!r}"
    )
    assert math.isfinite(float(lines[-1][study.metric_id]))
