"""submit.py in-process: options reach the request, and every pre-flight refusal is one
clear line before any API call; the cost levers (FLEX_START, Reduction Server, reservations,
persistent resources, labels, disable_retries) in every rendering and in the request the REST
stand-in receives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from google.cloud import aiplatform_v1

from fake_vertex import FakeGoogleCloud
from submit_helpers import (
    RAW,
    STAMP,
    can_use_reduction_server,
    cloud_values,
    parse_strict,
    project_copy,
    submit_in_process,
    write_config,
)
from vertex_trainer_tools.errors import ToolError


@pytest.fixture
def project(tmp_path) -> Path:
    return project_copy(tmp_path)


@pytest.fixture
def cloud(project, tmp_path, monkeypatch, capsys):
    return submit_in_process(project, tmp_path, monkeypatch, capsys)


def test_package_mode_uploads_the_sdist_it_submits(project, cloud):
    with FakeGoogleCloud() as server:
        code, out, err = cloud("--package", "--dist-dir=dist", server=server)
    assert code == 0, err
    (body,) = server.created("customJobs")
    # The runtime's sdist first (the trainer's requirement on it), then the trainer's.
    runtime_uri, uri = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    assert "/vertex_trainer_runtime-" in runtime_uri and runtime_uri in server.uploads
    sdist = next(p for p in (project / "dist").glob("*.tar.gz") if "runtime" not in p.name)
    assert uri.endswith("/" + sdist.name) and uri in server.uploads
    assert sdist.read_bytes() in server.uploads[uri], "the upload carries the sdist's bytes"


def test_tensorboard_experiment_and_scheduling_reach_the_request(project, cloud):
    data = cloud_values(RAW)
    region = data["region"]
    data["job"].update(
        service_account="trainer@demo-project-123.iam.gserviceaccount.com",
        tensorboard=f"projects/demo-project-123/locations/{region}/tensorboards/42",
        network="projects/123/global/networks/vpc",
        enable_web_access=True,
    )
    data["job"]["scheduling"].update(strategy="SPOT", restart_job_on_worker_restart=True)
    write_config(project, data)
    with FakeGoogleCloud() as server:
        code, out, err = cloud(server=server)
    assert code == 0, err
    spec = parse_strict(aiplatform_v1.CustomJob, server.created()[0]).job_spec
    assert spec.service_account == data["job"]["service_account"]
    assert spec.tensorboard == data["job"]["tensorboard"]
    assert spec.network == data["job"]["network"]
    assert spec.enable_web_access
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert spec.scheduling.restart_job_on_worker_restart


def test_an_experiment_gets_the_jobs_run_and_the_trainer_its_names(project, cloud):
    """submit makes the run (SDK: submit(experiment_run=) needs it) and names it in the env
    that vertex_trainer_runtime.tracking reads; dry runs show the same; tuning studies get
    neither."""
    data = cloud_values(RAW)
    data["job"].update(service_account="sa@demo-project-123.iam.gserviceaccount.com")
    data["job"].update(tensorboard="", experiment="new-experiment")
    write_config(project, data)
    with FakeGoogleCloud(experiments=()) as server:
        code, out, err = cloud(server=server)
    assert code == 0, err
    spec = parse_strict(aiplatform_v1.CustomJob, server.created()[0]).job_spec
    contexts = f"projects/demo-project-123/locations/{data['region']}/metadataStores/default"
    assert spec.experiment == f"{contexts}/contexts/new-experiment"
    run_id = spec.experiment_run.rpartition("/contexts/new-experiment-")[2]
    assert STAMP.search(run_id) and spec.experiment_run.startswith(f"{contexts}/contexts/")
    # Made RUNNING before the job; the SDK's wait ends it with the job (jobs.py: "End the
    # experiment run associated with the custom job").
    assert server.metadata.run("new-experiment", run_id)["_state"] == "COMPLETE"
    env = {e.name: e.value for e in spec.worker_pool_specs[0].container_spec.env}
    assert env["AIP_EXPERIMENT_NAME"] == spec.experiment
    assert env["AIP_EXPERIMENT_RUN_NAME"] == spec.experiment_run

    code, out, err = cloud("--dry-run")
    spec = aiplatform_v1.CustomJob.from_json(out).job_spec
    env = {e.name: e.value for e in spec.worker_pool_specs[0].container_spec.env}
    assert env["AIP_EXPERIMENT_RUN_NAME"] == spec.experiment_run != ""

    code, out, err = cloud("--gcloud-config")
    spec = yaml.safe_load((project / "build" / "gcloud" / "custom-job.yaml").read_text())
    assert "experimentRun" not in spec, "gcloud makes no run: the trainer does"
    assert "AIP_EXPERIMENT_RUN_NAME" in json.dumps(spec["workerPoolSpecs"][0])

    code, out, err = cloud("--dry-run", "--hpt")
    study = aiplatform_v1.HyperparameterTuningJob.from_json(out)
    assert not study.trial_job_spec.experiment_run
    assert "AIP_EXPERIMENT_NAME" not in out
    assert "trials are not tracked" in err


@pytest.mark.parametrize("where", ["project", "region"])
def test_an_empty_project_or_region_is_one_line_not_a_traceback(project, cloud, where):
    data = cloud_values(RAW)
    data[where] = ""
    write_config(project, data)
    for argv in (("--dry-run",), ("--gcloud-config",)):
        code, out, err = cloud(*argv)
        assert code == 2 and not out
        (line,) = err.strip().splitlines()
        assert line.startswith("ERROR: vertex.yaml:") and f" {where}: must not be empty" in line


def test_no_sync_returns_once_the_job_exists(cloud):
    with FakeGoogleCloud(polls_before_end=1000) as server:
        code, out, err = cloud("--no-sync", server=server)
        assert code == 0, err
        (name,) = server.jobs
        assert server.gets(name) == 0, "--no-sync must not wait for the job"
        assert "stream-logs" in out


def refused(cloud, expected: str, **server_options) -> FakeGoogleCloud:
    """Submit and expect one ERROR line containing ``expected`` and no job at Vertex."""
    with FakeGoogleCloud(**server_options) as server:
        code, out, err = cloud(server=server)
    found = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert code != 0 and len(found) == 1, err
    assert expected in found[0], found
    assert server.created() == [], "nothing may reach Vertex after a failed check"
    return server


def test_placeholder_values_are_refused_before_any_request(project, cloud):
    write_config(project, cloud_values(RAW) | {"project": "my-gcp-project"})
    server = refused(cloud, "placeholder")
    assert server.requests == []


def test_bucket_without_gs_form_is_refused(project, cloud):
    write_config(project, cloud_values(RAW) | {"staging_bucket": "demo-bucket"})
    refused(cloud, "is not a bucket URI of the form gs://")


def test_bucket_in_another_region_is_refused(cloud):
    refused(cloud, "is in europe-west4 but jobs run in", bucket_location="EUROPE-WEST4")


def test_missing_bucket_points_to_gcp_setup(cloud):
    refused(cloud, "make gcp-setup", buckets=set())


def test_image_not_pushed_yet_is_refused(cloud):
    refused(cloud, "not found in its registry: run `make build-push`", images=set())


def test_unnamed_image_is_refused(project, cloud):
    data = cloud_values(RAW)
    data["image"]["name"] = ""
    write_config(project, data)
    refused(cloud, "image.name: must not be empty (e.g. trainer)")


def test_unknown_accelerator_is_refused(project, cloud):
    data = cloud_values(RAW)
    data["job"]["worker_pools"][0].update(accelerator_type="NVIDIA_TESLA_Q9", accelerator_count=1)
    write_config(project, data)
    refused(cloud, "unknown accelerator 'NVIDIA_TESLA_Q9'")


def test_missing_credentials_say_how_to_log_in(cloud):
    code, out, err = cloud()
    assert code != 0
    (line,) = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert "gcloud auth application-default login" in line


def test_unknown_region_is_one_line_with_close_matches(project, cloud):
    data = cloud_values(RAW)
    data["region"] = "us-centrall1"
    data["image"]["registry_host"] = "us-docker.pkg.dev"
    write_config(project, data)
    server = refused(cloud, "region: 'us-centrall1' is not a Vertex AI training region (did")
    assert server.requests == []


def test_a_study_parameter_the_trainer_lacks_is_refused_before_any_request(project, cloud):
    data = cloud_values(RAW)
    parameters = data["hpt"]["parameters"]
    pid = next(iter(parameters))
    parameters[pid + pid[-1]] = parameters.pop(pid)
    write_config(project, data)
    with FakeGoogleCloud() as server:
        code, out, err = cloud("--hpt", server=server)
    (line,) = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert code != 0 and "not a flag of the trainer" in line
    assert server.requests == []
    code, out, err = cloud("--hpt", "--dry-run")  # a dry run checks the same
    assert code != 0 and "not a flag of the trainer" in err


LEVERS = ["flex_start", "reduction_server", "reservation", "persistent_resource"]
LABELS = {"team": "nlp", "cost-center": "cc-42"}
RESERVATION = "projects/demo-project-123/zones/us-central1-a/reservations/h100s"


def cost_levers(raw: dict, lever: str) -> dict:
    """GPU workers with FLEX_START and a max wait, or with a Reduction Server (and SPOT); or
    on a specific reservation (with a Reduction Server) or a persistent resource, labelled,
    without retries."""
    data = cloud_values(raw)
    chief = {**data["job"]["worker_pools"][0], "accelerator_type": "NVIDIA_H100_80GB"}
    chief.update(machine_type="a3-highgpu-8g", accelerator_count=8)
    data["job"]["worker_pools"] = [chief, {**chief, "replica_count": 3}]
    scheduling = data["job"]["scheduling"]
    if lever == "flex_start":
        scheduling.update(strategy="FLEX_START", max_wait="3600s")
    elif lever == "reduction_server":
        data["job"]["reduction_server"] = {"replica_count": 4, "machine_type": "n1-highcpu-16"}
        scheduling.update(strategy="SPOT")
    else:
        scheduling.update(disable_retries=True, restart_job_on_worker_restart=False)
        data["job"]["labels"] = LABELS
        if lever == "reservation":
            data["job"]["reservation"] = RESERVATION
            data["job"]["reduction_server"] = {"replica_count": 4}
        else:
            data["job"]["persistent_resource_id"] = "h100-cluster"
    return data


def assert_capacity(spec, lever: str) -> None:
    """A reservation in the trainer pools' machine specs (not the reducers'), or a persistent
    resource; never retried."""
    assert spec.scheduling.disable_retries
    pools = spec.worker_pool_specs
    affinities = [p.machine_spec.reservation_affinity for p in pools]
    if lever == "persistent_resource":
        assert spec.persistent_resource_id == "h100-cluster"
        assert [a.reservation_affinity_type for a in affinities] == [0, 0]
        return
    assert not spec.persistent_resource_id
    specific = aiplatform_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    assert [a.reservation_affinity_type for a in affinities] == [specific, specific, 0]
    assert affinities[0].key == "compute.googleapis.com/reservation-name"
    assert list(affinities[1].values) == [RESERVATION]


def assert_cost_levers(spec, lever: str) -> None:
    pools = spec.worker_pool_specs
    assert pools[1].container_spec.image_uri == pools[0].container_spec.image_uri
    if lever in ("reservation", "persistent_resource"):
        return assert_capacity(spec, lever)
    if lever == "flex_start":
        assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
        assert spec.scheduling.max_wait_duration.total_seconds() == 3600
        assert [p.replica_count for p in pools] == [1, 3]
        return
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert [p.replica_count for p in pools] == [1, 3, 4]
    server = pools[2]
    image = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    assert server.container_spec.image_uri == image
    assert list(server.container_spec.args) == [], "the reducers run no trainer"
    assert server.machine_spec.machine_type == "n1-highcpu-16"
    assert not server.machine_spec.accelerator_count


@pytest.mark.parametrize("lever", LEVERS)
def test_cost_levers_in_every_rendering(project, cloud, lever):
    data = cost_levers(RAW, lever)
    labels = data["job"].get("labels", {})
    write_config(project, data)
    can_use_reduction_server(project)
    code, out, err = cloud("--dry-run")
    assert code == 0, err
    job = parse_strict(aiplatform_v1.CustomJob, json.loads(out))
    assert_cost_levers(job.job_spec, lever)
    assert dict(job.labels) == labels
    code, out, err = cloud("--dry-run", "--hpt")
    assert code == 0, err
    study = parse_strict(aiplatform_v1.HyperparameterTuningJob, json.loads(out))
    assert_cost_levers(study.trial_job_spec, lever)
    assert dict(study.labels) == labels
    code, custom_out, err = cloud("--gcloud-config")
    assert code == 0, err
    assert cloud("--gcloud-config", "--hpt")[0] == 0
    spec = yaml.safe_load((project / "build/gcloud/custom-job.yaml").read_text())
    assert_cost_levers(parse_strict(aiplatform_v1.CustomJobSpec, spec), lever)
    # A CustomJobSpec has no labels: gcloud takes them as a flag.
    assert ("--labels=team=nlp,cost-center=cc-42" in custom_out) == bool(labels)
    study = yaml.safe_load((project / "build/gcloud/hpt-job.yaml").read_text())
    study = parse_strict(aiplatform_v1.HyperparameterTuningJob, study)
    assert_cost_levers(study.trial_job_spec, lever)
    assert dict(study.labels) == labels


@pytest.mark.parametrize("lever", LEVERS)
def test_cost_levers_reach_vertex(project, cloud, lever):
    data = cost_levers(RAW, lever)
    write_config(project, data)
    can_use_reduction_server(project)
    strategy = data["job"]["scheduling"]["strategy"]
    for argv, kind in (((), "customJobs"), (("--hpt",), "hyperparameterTuningJobs")):
        with FakeGoogleCloud() as server:
            code, out, err = cloud(*argv, server=server)
        assert code == 0, err
        (body,) = server.created(kind)
        spec = body["jobSpec" if kind == "customJobs" else "trialJobSpec"]
        if strategy != "STANDARD":  # STANDARD is what Vertex does when none is given
            wanted = int(aiplatform_v1.Scheduling.Strategy[strategy])
            assert spec["scheduling"]["strategy"] == wanted
        assert body.get("labels", {}) == data["job"].get("labels", {})
        if kind == "customJobs":
            message = parse_strict(aiplatform_v1.CustomJob, body).job_spec
        else:
            message = parse_strict(aiplatform_v1.HyperparameterTuningJob, body).trial_job_spec
        assert_cost_levers(message, lever)


def test_a_long_experiment_keeps_the_runs_timestamp_within_128_characters():
    from vertex_trainer_tools import config as config_lib
    from vertex_trainer_tools.render import experiment_run, unique_display_name

    data = cloud_values(RAW)
    data["job"].update(experiment="e" * 100, service_account="sa@p.iam.gserviceaccount.com")
    cfg = config_lib.parse(data, "vertex.yaml")
    display_name = unique_display_name("x" * 200)
    run = experiment_run(cfg, display_name)
    assert len(f"{cfg.job.experiment}-{run}") <= 128 and display_name.endswith(run)
    assert STAMP.search(run) and run[0].isalnum()

    data["job"]["experiment"] = "e" * 101
    with pytest.raises(ToolError, match=r"job.experiment: .*\(1-100\)"):
        config_lib.parse(data, "vertex.yaml")
