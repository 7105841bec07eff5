"""The training image trains as Vertex runs it (``make test-docker``).

``project_image`` (a fixture of vertex-trainer-tools) builds this project's Dockerfile as ``make
build BASE_IMAGE=...`` does, on ``TEST_BASE_IMAGE`` or the stand-in base of ``make base-image``,
and skips, saying why, without a Docker engine or a base. The local emulator then runs the job
of vertex.yaml as containers of that image (``make train-local IMAGE=...``): Vertex's
environment, the job folder mounted at ``/gcs/<bucket>/...``, ``/tmp/hypertune`` read back.
"""

from __future__ import annotations

import math

import pytest
from conftest import SMOKE_ARGS
from vertex_trainer_tools import config

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_image_trains_as_a_trial_of_the_study(project_image, hpt_trial, vertex_project, tmp_path):
    metric = config.load(vertex_project / "vertex.yaml").hpt.metric_id
    job = hpt_trial(tmp_path / "job", SMOKE_ARGS, runner_args=[f"--image={project_image}"])
    assert job.returncode == 0, job.tail()
    model = job.output_dir / "1" / "model"
    assert model.is_dir() and any(model.iterdir()), "nothing exported to AIP_MODEL_DIR"
    reports = job.metrics()
    assert reports and all(math.isfinite(float(r[metric])) for r in reports), reports


def test_image_trains_as_a_chief_and_a_worker(project_image, local_job, tmp_path):
    job = local_job(
        tmp_path / "job", SMOKE_ARGS, replicas=2, runner_args=[f"--image={project_image}"]
    )
    assert job.returncode == 0, job.tail()
    assert job.lines("workerpool0-0") and job.lines("workerpool1-0"), job.tail()
    model = job.output_dir / "model"
    assert model.is_dir() and any(model.iterdir()), "nothing exported:\n" + job.tail()
    assert "last metric the chief reported" in job.output, job.tail()
