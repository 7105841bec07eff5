"""``make gcloud-config`` against gcloud itself: the command it prints runs, gcloud's own client
checks pass, and what gcloud sends to Vertex is what ``make submit`` sends (the dry run's
request), for custom jobs and studies, with and without skipped pools.

gcloud runs offline with a fake access token, its Vertex endpoint pointed at the local
stand-in (``CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM``), which records the request bodies.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from fake_vertex import FakeGoogleCloud
from submit_helpers import (
    RAW,
    cloud_values,
    project_copy,
    submit_in_process,
    without_stamps,
    write_config,
)
from vertex_trainer_tools import render

GCLOUD = shutil.which("gcloud")
pytestmark = pytest.mark.skipif(GCLOUD is None, reason="gcloud is not installed")

CHIEF = {"machine_type": "n1-standard-8", "accelerator_type": "NONE", "accelerator_count": 0}
SERVERS = {**CHIEF, "replica_count": 2, "image_uri": "us-docker.pkg.dev/p/r/ps:1"}
GPU = {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100"}
GPU_POOL = {**GPU, "accelerator_count": 1}

# (id, job: changes, extra flags of submit)
JOBS = [
    ("default", {}, []),
    ("workers-and-labels", {"worker_pools": [CHIEF, {**CHIEF, "replica_count": 3}]}, []),
    ("skip-workers", {"worker_pools": [CHIEF, {}, {**CHIEF, "replica_count": 2}]}, []),
    (
        "skip-workers-args-with-commas",
        {
            "worker_pools": [GPU_POOL, {}, {}, {**GPU_POOL, "replica_count": 1}],
            "args": ["--train-data=gs://b/a.csv,gs://b/b.csv", "--num-boost-round=7"],
        },
        [],
    ),
    ("skip-workers-python-package", {"worker_pools": [CHIEF, {}, CHIEF]}, ["--package"]),
]


@pytest.fixture
def project(tmp_path):
    return project_copy(tmp_path)


@pytest.fixture
def submit(project, tmp_path, monkeypatch, capsys):
    return submit_in_process(project, tmp_path, monkeypatch, capsys)


def configure(project, job: dict) -> None:
    data = cloud_values(RAW)
    data["job"].update(job)
    data["job"]["labels"] = {"team": "nlp", "cost-center": "cc-42"}
    write_config(project, data)


def run_gcloud(command: str, project, tmp_path, server: FakeGoogleCloud):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud-run"),
        "CLOUDSDK_AUTH_ACCESS_TOKEN": "fake-token",
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": server.url + "/",
    }
    return subprocess.run(
        ["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


def printed_command(out: str) -> str:
    """The gcloud command ``gcloud-config`` printed (after any ``gcloud storage cp`` lines)."""
    lines = out.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("gcloud ai "))
    return "\n".join(lines[start:])


def same_request(sent: dict, dry_run: dict) -> None:
    """What gcloud sent is the dry run's request, but for the second stamped in the names and
    a boot disk left to Vertex's default (``--worker-pool-spec`` has no disk keys)."""
    for request in (sent, dry_run):
        spec = request.get("trialJobSpec") or request["jobSpec"]
        for pool in spec["workerPoolSpecs"]:
            if pool.get("diskSpec") == render.DEFAULT_DISK:
                del pool["diskSpec"]
    assert without_stamps(sent) == without_stamps(dry_run)


def through_gcloud(project, submit, tmp_path, flags: list[str], kind: str) -> str:
    """Run the command ``gcloud-config`` printed; gcloud must send the dry run's request."""
    code, out, err = submit("--gcloud-config", *flags)
    assert code == 0, err
    code, dry, err = submit("--dry-run", *flags)
    assert code == 0, err
    with FakeGoogleCloud() as server:
        ran = run_gcloud(printed_command(out), project, tmp_path, server)
        assert ran.returncode == 0, ran.stderr
        (sent,) = server.created(kind)
    same_request(sent, json.loads(dry))
    return out


@pytest.mark.parametrize(("job", "flags"), [c[1:] for c in JOBS], ids=[c[0] for c in JOBS])
def test_gcloud_runs_the_printed_command_and_sends_the_dry_runs_request(
    project, submit, tmp_path, job, flags
):
    configure(project, job)
    out = through_gcloud(project, submit, tmp_path, flags, "customJobs")
    assert ("--worker-pool-spec=" in out) == ({} in job.get("worker_pools", [])), out


def test_a_study_runs_through_gcloud_with_a_skipped_pool(project, submit, tmp_path):
    configure(project, {"worker_pools": [CHIEF, {}, {**CHIEF, "replica_count": 2}]})
    through_gcloud(project, submit, tmp_path, ["--hpt"], "hyperparameterTuningJobs")


@pytest.mark.parametrize(
    ("job", "why"),
    [
        ({"env": {"LOG_LEVEL": "debug"}}, "environment variables (job.env, job.experiment)"),
        ({"reservation": "any"}, "a reservation (job.reservation)"),
        ({"worker_pools": [{**CHIEF, "boot_disk_size_gb": 200}, {}, CHIEF]}, "boot disk"),
        ({"worker_pools": [CHIEF, {}, SERVERS], "args": ["--seed=1"]}, "trainer args for one"),
    ],
)
def test_a_skipped_pool_gcloud_cannot_write_is_one_line(project, submit, job, why):
    job = {"worker_pools": [CHIEF, {}, CHIEF], **job}
    configure(project, job)
    code, out, err = submit("--gcloud-config")
    lines = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "job.worker_pools: gcloud cannot write a skipped pool in --config" in lines[0]
    assert f"cannot carry {why}" in lines[0] and "use make submit" in lines[0]
    assert not out.strip()
