"""tools/submit.py through the Makefile: dry runs parse into the real Vertex types, and
``make submit`` / ``make submit-hpt`` talk to a local stand-in for the Vertex REST API.

Every test works on a copy of the project with vertex.yaml's placeholders replaced, so the
tools can write dist/ and build/ without racing each other.
"""

from __future__ import annotations

import copy
import datetime
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fake_vertex import FakeGoogleCloud
from google.cloud import aiplatform_v1
from google.protobuf import json_format

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:  # tools/ is not installed: it runs from the project root
    sys.path.insert(0, str(PROJECT))
submit_lib = importlib.import_module("tools.submit")

RAW = yaml.safe_load((PROJECT / "vertex.yaml").read_text())
COPY_IGNORE = shutil.ignore_patterns(
    ".git", "outputs", "dist", "build", "*.egg-info", "__pycache__", ".*_cache", ".venv", "venv"
)
STAMP = re.compile(r"\d{8}-\d{6}")
# Blocks every network connection except loopback: proves dry runs need no network.
NO_NETWORK = """
import socket
_connect = socket.socket.connect
def _guard(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
        raise OSError("network blocked by the test: " + str(address))
    return _connect(self, address)
socket.socket.connect = _guard
"""


def cloud_values(raw: dict) -> dict:
    data = copy.deepcopy(raw)
    data["project"] = "demo-project-123"
    data["staging_bucket"] = "gs://demo-bucket"
    data["base_output_dir"] = "gs://demo-bucket/runs"
    return data


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the generated project whose vertex.yaml has real-looking values."""
    copy_dir = tmp_path / "project"
    shutil.copytree(PROJECT, copy_dir, ignore=COPY_IGNORE)
    write_config(copy_dir, cloud_values(RAW))
    return copy_dir


def write_config(project: Path, data: dict) -> None:
    (project / "vertex.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No credentials anywhere, no metadata server, no network but loopback."""
    guard = tmp_path / "no_network"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(NO_NETWORK)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "CLOUDSDK_", "VERTEX_", "MAKEFLAGS", "MFLAGS"))
    }
    env.update(
        HOME=str(tmp_path),
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
        NO_GCE_CHECK="True",
        PYTHONPATH=str(guard),
    )
    env.update(extra)
    return env


def make(project: Path, env: dict, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def errors(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]


def parse_strict(message_type, data: dict):
    """Parse camelCase JSON into the real proto type, rejecting any unknown field."""
    message = message_type()
    json_format.ParseDict(data, message._pb, ignore_unknown_fields=False)
    return message


def without_stamps(data: dict) -> dict:
    return json.loads(STAMP.sub("STAMP", json.dumps(data)))


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
    results["config"] = importlib.import_module("tools.config").load(copy_dir / "vertex.yaml")
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


def test_dry_run_package_mode_names_the_sdist_and_the_executor(project, cloud):
    code, out, err = cloud("--dry-run", "--package")
    assert code == 0, err
    job = aiplatform_v1.CustomJob.from_json(out, ignore_unknown_fields=False)
    spec = job.job_spec.worker_pool_specs[0].python_package_spec
    cfg = importlib.import_module("tools.config").load(project / "vertex.yaml")
    assert spec.executor_image_uri == cfg.python_package.executor_image_uri
    assert spec.python_module == "trainer.task"
    (uri,) = spec.package_uris
    sdist = next((project / "dist").glob("*.tar.gz"))
    assert uri == f"{cfg.staging_bucket}/packages/{job.display_name}/{sdist.name}"
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
    code = submit_lib.main(["--dry-run", f"--config={PROJECT / 'vertex.yaml'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    json.loads(out)
    placeholders = importlib.import_module("tools.config").load(PROJECT / "vertex.yaml")
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


@pytest.mark.parametrize("target", ["submit", "submit-hpt"])
def test_a_failed_job_is_one_clear_error_and_a_nonzero_exit(dry_runs, tmp_path, target):
    message = "The replica workerpool0-0 exited with a non-zero status of 1."
    with FakeGoogleCloud(end_state="JOB_STATE_FAILED", error_message=message) as server:
        run = make(dry_runs["project"], fake_env(tmp_path, server), target)
    assert run.returncode != 0
    (line,) = errors(run)
    assert "JOB_STATE_FAILED" in line and message in line


def test_no_sync_returns_once_the_study_exists(dry_runs, tmp_path):
    with FakeGoogleCloud(polls_before_end=1000) as server:
        run = make(dry_runs["project"], fake_env(tmp_path, server), "submit-hpt", "SYNC=0")
        assert run.returncode == 0, run.stderr
        assert len(server.created()) == 1
        assert "stream-logs" in run.stdout


# --- the same tool in-process, for the option and error paths --------------------------------


@pytest.fixture
def cloud(project, tmp_path, monkeypatch, capsys):
    """Run ``tools.submit.main`` in the project copy against a fresh stand-in."""
    for name in [n for n in os.environ if n.startswith(("GOOGLE_", "VERTEX_", "CLOUDSDK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(project)

    def submit(*argv: str, server: FakeGoogleCloud | None = None) -> tuple[int, str, str]:
        if server is not None:
            monkeypatch.setenv(submit_lib.ENDPOINT_ENV, server.url)
        else:
            monkeypatch.delenv(submit_lib.ENDPOINT_ENV, raising=False)
        code = submit_lib.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return submit


def test_package_mode_uploads_the_sdist_it_submits(project, cloud):
    with FakeGoogleCloud() as server:
        code, out, err = cloud("--package", "--dist-dir=dist", server=server)
    assert code == 0, err
    (body,) = server.created("customJobs")
    (uri,) = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    sdist = next((project / "dist").glob("*.tar.gz"))
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

    data["job"].update(tensorboard="", experiment="my-experiment")
    write_config(project, data)
    with FakeGoogleCloud() as server:
        code, out, err = cloud(server=server)
    assert code == 0, err
    spec = parse_strict(aiplatform_v1.CustomJob, server.created()[0]).job_spec
    assert spec.experiment.endswith("/metadataStores/default/contexts/my-experiment")


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
    refused(cloud, "image.name: missing")


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
    server = refused(cloud, "region: 'us-centrall1' is not a Vertex AI region (did you mean")
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


def cost_levers(raw: dict, lever: str) -> dict:
    """GPU workers with FLEX_START and a max wait, or with a Reduction Server (and SPOT)."""
    data = cloud_values(raw)
    chief = {**data["job"]["worker_pools"][0], "accelerator_type": "NVIDIA_H100_80GB"}
    chief.update(machine_type="a3-highgpu-8g", accelerator_count=8)
    data["job"]["worker_pools"] = [chief, {**chief, "replica_count": 3}]
    if lever == "flex_start":
        data["job"]["scheduling"].update(strategy="FLEX_START", max_wait="3600s")
    else:
        data["job"]["reduction_server"] = {"replica_count": 4, "machine_type": "n1-highcpu-16"}
        data["job"]["scheduling"].update(strategy="SPOT")
    return data


def assert_cost_levers(spec, lever: str) -> None:
    pools = spec.worker_pool_specs
    assert pools[1].container_spec.image_uri == pools[0].container_spec.image_uri
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


@pytest.mark.parametrize("lever", ["flex_start", "reduction_server"])
def test_cost_levers_in_every_rendering(project, cloud, lever):
    write_config(project, cost_levers(RAW, lever))
    code, out, err = cloud("--dry-run")
    assert code == 0, err
    assert_cost_levers(parse_strict(aiplatform_v1.CustomJob, json.loads(out)).job_spec, lever)
    code, out, err = cloud("--dry-run", "--hpt")
    assert code == 0, err
    study = parse_strict(aiplatform_v1.HyperparameterTuningJob, json.loads(out))
    assert_cost_levers(study.trial_job_spec, lever)
    assert cloud("--gcloud-config")[0] == 0 and cloud("--gcloud-config", "--hpt")[0] == 0
    spec = yaml.safe_load((project / "build/gcloud/custom-job.yaml").read_text())
    assert_cost_levers(parse_strict(aiplatform_v1.CustomJobSpec, spec), lever)
    study = yaml.safe_load((project / "build/gcloud/hpt-job.yaml").read_text())
    study = parse_strict(aiplatform_v1.HyperparameterTuningJob, study)
    assert_cost_levers(study.trial_job_spec, lever)


@pytest.mark.parametrize("lever", ["flex_start", "reduction_server"])
def test_cost_levers_reach_vertex(project, cloud, lever):
    write_config(project, cost_levers(RAW, lever))
    strategy = "FLEX_START" if lever == "flex_start" else "SPOT"
    for argv, kind in (((), "customJobs"), (("--hpt",), "hyperparameterTuningJobs")):
        with FakeGoogleCloud() as server:
            code, out, err = cloud(*argv, server=server)
        assert code == 0, err
        (body,) = server.created(kind)
        spec = body["jobSpec" if kind == "customJobs" else "trialJobSpec"]
        assert spec["scheduling"]["strategy"] == int(aiplatform_v1.Scheduling.Strategy[strategy])
        if kind == "customJobs":
            message = parse_strict(aiplatform_v1.CustomJob, body).job_spec
        else:
            message = parse_strict(aiplatform_v1.HyperparameterTuningJob, body).trial_job_spec
        assert_cost_levers(message, lever)
