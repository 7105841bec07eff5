"""submit.py through the Makefile: dry runs parse into the real Vertex types, and
``make submit`` / ``make submit-hpt`` talk to a local stand-in for the Vertex REST API.

Every test works on a copy of the project with vertex.yaml's placeholders replaced, so the
tools can write dist/ and build/ without racing each other.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from google.cloud import aiplatform_v1
from google.protobuf import json_format

from fake_vertex import FakeGoogleCloud
from submit_helpers import (
    COPY_IGNORE,
    PROJECT,
    RAW,
    cloud_values,
    errors,
    make,
    offline_env,
    parse_strict,
    pin_runtime,
    project_copy,
    submit_in_process,
    submit_lib,
    without_stamps,
    write_config,
)
from vertex_trainer_tools import cli
from vertex_trainer_tools import config as config_lib


@pytest.fixture
def project(tmp_path) -> Path:
    return project_copy(tmp_path)


@pytest.fixture
def cloud(project, tmp_path, monkeypatch, capsys):
    return submit_in_process(project, tmp_path, monkeypatch, capsys)


# --- dry runs: the exact request, offline ------------------------------------------------------


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict:
    """The dry runs a newcomer makes, run once: make submit / submit-hpt DRY_RUN=1, etc."""
    tmp_path = tmp_path_factory.mktemp("dry")
    copy_dir = tmp_path / "project"
    shutil.copytree(PROJECT, copy_dir, ignore=COPY_IGNORE)
    write_config(copy_dir, cloud_values(RAW))
    env = offline_env(tmp_path)
    runs = {
        "submit": ("submit", "DRY_RUN=1", "ARGS=--seed=7"),
        "hpt": ("submit-hpt", "DRY_RUN=1"),
    }
    results = {key: make(copy_dir, env, *args) for key, args in runs.items()}
    for key, run in results.items():
        assert run.returncode == 0, f"{key}: {run.stderr}"
    results["project"] = copy_dir
    results["config"] = config_lib.load(copy_dir / "vertex.yaml")
    return results


def test_dry_run_custom_job_is_a_valid_custom_job(dry_runs):
    job = aiplatform_v1.CustomJob.from_json(dry_runs["submit"].stdout, ignore_unknown_fields=False)
    cfg = dry_runs["config"]
    chief = job.job_spec.worker_pool_specs[0]
    assert chief.container_spec.image_uri == cfg.image_uri
    assert chief.machine_spec.machine_type == cfg.chief.machine_type
    assert chief.replica_count == cfg.chief.replica_count
    assert list(chief.container_spec.args) == [*cfg.job.args, "--seed=7"]
    assert job.display_name.startswith(cfg.job.display_name + "-")
    prefix = job.job_spec.base_output_directory.output_uri_prefix
    assert prefix == f"{cfg.base_output_dir}/{job.display_name}"
    assert job.job_spec.scheduling.timeout.total_seconds() == cfg.job.scheduling.timeout_seconds


def test_dry_run_hpt_is_a_valid_study_of_the_config(dry_runs):
    study = aiplatform_v1.HyperparameterTuningJob.from_json(
        dry_runs["hpt"].stdout, ignore_unknown_fields=False
    )
    hpt = dry_runs["config"].hpt
    assert [m.metric_id for m in study.study_spec.metrics] == [hpt.metric_id]
    assert study.study_spec.metrics[0].goal.name == hpt.goal.upper()
    assert [p.parameter_id for p in study.study_spec.parameters] == [p.id for p in hpt.parameters]
    assert study.max_trial_count == hpt.max_trial_count
    assert study.parallel_trial_count == hpt.parallel_trial_count
    assert study.trial_job_spec.worker_pool_specs[0].container_spec.image_uri


def test_dry_run_package_mode_names_the_sdists_and_the_executor(project, cloud):
    pin_runtime(project)  # as the template pins it: its sdist goes first
    code, out, err = cloud("--dry-run", "--package")
    assert code == 0, err
    job = aiplatform_v1.CustomJob.from_json(out, ignore_unknown_fields=False)
    spec = job.job_spec.worker_pool_specs[0].python_package_spec
    cfg = config_lib.load(project / "vertex.yaml")
    assert spec.executor_image_uri == cfg.python_package.executor_image_uri
    assert spec.python_module == "trainer.task"
    runtime = next((project / "dist").glob("vertex_trainer_runtime-*.tar.gz"))
    trainer = next((project / "dist").glob("vertex_trainer-*.tar.gz"))
    folder = f"{cfg.staging_bucket}/packages/{job.display_name}"
    assert list(spec.package_uris) == [f"{folder}/{runtime.name}", f"{folder}/{trainer.name}"]
    for sdist in (runtime, trainer):  # the dry run says where each would go
        assert f"(not uploaded: would go to {folder}/{sdist.name})" in err
    assert not list(project.glob("*.egg-info")), "the sdist build litters the project"


def test_gcloud_config_yaml_is_what_gcloud_reads(project, cloud):
    code, custom_out, err = cloud("--gcloud-config")
    assert code == 0, err
    code, hpt_out, err = cloud("--gcloud-config", "--hpt")
    assert code == 0, err
    spec = yaml.safe_load((project / "build/gcloud/custom-job.yaml").read_text())
    parse_strict(aiplatform_v1.CustomJobSpec, spec)
    study = yaml.safe_load((project / "build/gcloud/hpt-job.yaml").read_text())
    parse_strict(aiplatform_v1.HyperparameterTuningJob, study)
    assert "displayName" not in study  # given by --display-name
    assert "gcloud ai custom-jobs create" in custom_out
    assert "--config=build/gcloud/custom-job.yaml" in custom_out
    assert "gcloud ai hp-tuning-jobs create" in hpt_out
    assert "--config=build/gcloud/hpt-job.yaml" in hpt_out


def test_dry_run_of_the_untouched_config_warns_about_placeholders(tmp_path, monkeypatch, capsys):
    for name in [n for n in os.environ if n.startswith(("GOOGLE_", "VERTEX_"))]:
        monkeypatch.delenv(name)
    code = cli.main(["submit", "--dry-run", f"--config={PROJECT / 'vertex.yaml'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    json.loads(out)
    placeholders = config_lib.load(PROJECT / "vertex.yaml")
    assert err.count("placeholder") == len(placeholders.placeholders())


def test_display_names_are_unique_and_within_vertex_rules():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    assert submit_lib.unique_display_name("My Trainer_v2", when) == "my-trainer-v2-20260102-030405"
    long = submit_lib.unique_display_name("x" * 300, when)
    assert len(long) <= 128 and long.endswith("-20260102-030405")
    assert submit_lib.unique_display_name("!!!", when) == "job-20260102-030405"


# --- make submit / submit-hpt against the local stand-in of the Vertex REST API ---------------


def fake_env(tmp_path: Path, server: FakeGoogleCloud) -> dict[str, str]:
    return offline_env(tmp_path, VERTEX_API_ENDPOINT=server.url)


def test_make_submit_posts_the_dry_run_request_and_polls_until_success(dry_runs, tmp_path):
    project = dry_runs["project"]
    with FakeGoogleCloud(polls_before_end=1) as server:
        run = make(project, fake_env(tmp_path, server), "submit", "ARGS=--seed=7")
    assert run.returncode == 0, run.stderr
    (body,) = server.created("customJobs")
    dry = aiplatform_v1.CustomJob.from_json(dry_runs["submit"].stdout)
    assert without_stamps(body) == without_stamps(
        json_format.MessageToDict(dry._pb, use_integers_for_enums=True)
    )
    (name,) = server.jobs
    assert server.gets(name) >= 2, "polled while RUNNING, then saw SUCCEEDED"
    job_id = name.rsplit("/", 1)[-1]
    assert f"gcloud ai custom-jobs stream-logs {job_id} --region=" in run.stdout
    assert "console.cloud.google.com" in run.stdout
    assert "JOB_STATE_SUCCEEDED" in run.stdout


@pytest.mark.slow  # make test-all: the fast tier runs make submit's same path
def test_make_submit_hpt_posts_the_study_and_polls_until_success(dry_runs, tmp_path):
    project = dry_runs["project"]
    with FakeGoogleCloud(polls_before_end=1) as server:
        run = make(project, fake_env(tmp_path, server), "submit-hpt")
    assert run.returncode == 0, run.stderr
    (body,) = server.created("hyperparameterTuningJobs")
    dry = aiplatform_v1.HyperparameterTuningJob.from_json(dry_runs["hpt"].stdout)
    assert without_stamps(body) == without_stamps(
        json_format.MessageToDict(dry._pb, use_integers_for_enums=True)
    )
    (name,) = server.jobs
    assert server.gets(name) >= 2
    assert f"gcloud ai hp-tuning-jobs stream-logs {name.rsplit('/', 1)[-1]}" in run.stdout
    assert "JOB_STATE_SUCCEEDED" in run.stdout


@pytest.mark.parametrize("target", ["submit", pytest.param("submit-hpt", marks=pytest.mark.slow)])
def test_a_failed_job_is_one_clear_error_and_a_nonzero_exit(dry_runs, tmp_path, target):
    message = "The replica workerpool0-0 exited with a non-zero status of 1."
    with FakeGoogleCloud(end_state="JOB_STATE_FAILED", error_message=message) as server:
        run = make(dry_runs["project"], fake_env(tmp_path, server), target)
    assert run.returncode != 0
    (line,) = errors(run)
    assert "JOB_STATE_FAILED" in line and message in line


@pytest.mark.slow  # make test-all: the fast tier runs make submit's same path
def test_no_sync_returns_once_the_study_exists(dry_runs, tmp_path):
    with FakeGoogleCloud(polls_before_end=1000) as server:
        run = make(dry_runs["project"], fake_env(tmp_path, server), "submit-hpt", "SYNC=0")
        assert run.returncode == 0, run.stderr
        assert len(server.created()) == 1
        assert "stream-logs" in run.stdout


def test_median_early_stopping_is_the_studys_automated_stopping_spec(project, cloud):
    data = yaml.safe_load((project / "vertex.yaml").read_text())
    data["hpt"]["early_stopping"] = "median"
    write_config(project, data)
    code, out, err = cloud("--dry-run", "--hpt")
    assert code == 0, err
    study = aiplatform_v1.HyperparameterTuningJob.from_json(out, ignore_unknown_fields=False)
    assert "median_automated_stopping_spec" in study.study_spec
    assert '"medianAutomatedStoppingSpec": {}' in out
    data["hpt"]["early_stopping"] = "none"
    write_config(project, data)
    code, out, err = cloud("--dry-run", "--hpt")
    assert code == 0, err
    assert "medianAutomatedStoppingSpec" not in out
