"""The training image builds and really trains as a Vertex replica (``make test-docker``).

Needs a Docker engine and a base image: ``TEST_BASE_IMAGE``, else the stand-in base that ``make
base-image`` made (Debian + Python, cached by tag); without either the test skips and says why.
The image is built from this project's Dockerfile with ``BASE_IMAGE`` set, exactly as ``make
build BASE_IMAGE=...`` does (plus ``TEST_DOCKER_BUILD_ARGS``, space-separated NAME=VALUE build
arguments, for machines that need e.g. ``PIP_FIND_LINKS`` or ``CONSTRAINTS``), then run through
the tools package's ``containers`` with Vertex's environment: CLUSTER_SPEC, AIP_* folders as
``/gcs/BUCKET/...`` paths backed by a host folder, and /tmp/hypertune mounted to read the
reported metric; then ``make train-local IMAGE=<that image> REPLICAS=2`` runs the job as a chief
and a worker container. The containers, networks and the image are removed afterwards."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from vertex_trainer_tools import containers

PROJECT = Path(__file__).resolve().parent.parent
BUCKET = "test-bucket"
pytestmark = [pytest.mark.docker, pytest.mark.slow]
# A few seconds of training on built-in synthetic data, per framework.
SHORT_RUNS = {
    "xgboost": ["--num-boost-round=20"],
    "tensorflow": [
        "--model=small-cnn",
        "--weights=none",
        "--image-size=16",
        "--synthetic-examples=64",
        "--batch-size=16",
        "--epochs=1",
    ],
    "torch": [
        "--model-name-or-path=scratch",
        "--max-train-samples=64",
        "--max-eval-samples=32",
        "--max-seq-length=32",
        "--max-steps=4",
    ],
}


def docker(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def framework_args() -> list[str]:
    requirements = (PROJECT / "requirements.txt").read_text()
    (name,) = [name for name in SHORT_RUNS if f"\n{name}" in "\n" + requirements]
    return ["--train-data=synthetic", "--eval-data=synthetic", *SHORT_RUNS[name]]


@pytest.fixture(scope="module")
def base() -> str:
    if shutil.which("docker") is None:
        pytest.skip("no docker executable on PATH")
    version = docker("version", timeout=60)
    if version.returncode != 0:
        lines = version.stderr.strip().splitlines() or ["no answer"]
        pytest.skip(f"no Docker engine answers: {lines[-1]}")
    tag = (
        os.environ.get("TEST_BASE_IMAGE")
        or subprocess.run(
            [sys.executable, "-m", "vertex_trainer_tools", "base-image", "--print-tag"],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    if docker("image", "inspect", tag).returncode != 0:
        pytest.skip(f"no base image {tag}: run `make base-image` or set TEST_BASE_IMAGE")
    return tag


@pytest.fixture(scope="module")
def image(base) -> str:
    tag = f"local/{PROJECT.name.replace('_', '-')}-test:{uuid.uuid4().hex[:8]}"
    extra = os.environ.get("TEST_DOCKER_BUILD_ARGS", "").split()
    build_args = [f"--build-arg=BASE_IMAGE={base}", *[f"--build-arg={a}" for a in extra]]
    built = docker("build", "--force-rm", *build_args, "--tag", tag, str(PROJECT), timeout=3600)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    try:
        yield tag
    finally:
        docker("image", "rm", tag, timeout=300)


def test_image_trains_as_a_vertex_replica(image, tmp_path):
    metric = yaml.safe_load((PROJECT / "vertex.yaml").read_text())["hpt"]["metric"]["id"]
    bucket, hypertune = tmp_path / "bucket", tmp_path / "hypertune"
    spec = {
        "cluster": {"workerpool0": ["workerpool0-0:2222"]},
        "environment": "cloud",
        "task": {"type": "workerpool0", "index": 0, "trial": "1"},
        "job": "{}",
    }
    env = {
        "CLUSTER_SPEC": json.dumps(spec),
        "AIP_MODEL_DIR": f"/gcs/{BUCKET}/job/model/",
        "AIP_CHECKPOINT_DIR": f"/gcs/{BUCKET}/job/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"/gcs/{BUCKET}/job/logs/",
        "CLOUD_ML_JOB_ID": "1",
    }
    replica = containers.Replica(
        image,
        "workerpool0-0",
        env,
        framework_args(),
        gcs={BUCKET: str(bucket)},
        hypertune_dir=str(hypertune),
    )
    logs: list[str] = []
    with containers.job() as run:
        containers.start(replica, run, containers.create_network(run))
        reader = containers.stream_logs(run, "workerpool0-0", logs.append)
        code = containers.wait(run, "workerpool0-0")
        reader.join(30)
    assert code == 0, "\n".join(logs[-60:])
    model = bucket / "job" / "model"
    assert model.is_dir() and any(model.iterdir()), "nothing exported to AIP_MODEL_DIR"
    lines = (hypertune / "output.metrics").read_text().splitlines()
    reports = [json.loads(line) for line in lines]
    assert reports and all(math.isfinite(float(r[metric])) for r in reports), reports
    leftovers = docker("ps", "--all", "--quiet", "--filter", f"label={containers.label(run)}")
    assert not leftovers.stdout, "a container was left behind"


def test_train_local_runs_the_replicas_as_containers_of_the_image(image, tmp_path):
    """``make train-local IMAGE=<image> REPLICAS=2``: chief and worker containers train
    together on a network of the job, the chief exports into the job folder, nothing stays."""
    copy = tmp_path / "project"
    ignore = shutil.ignore_patterns("outputs", ".git", ".venv", "__pycache__", "*.egg-info")
    shutil.copytree(PROJECT, copy, ignore=ignore)  # its outputs/ is the test's
    args = " ".join(framework_args())
    command = ["make", "train-local", f"PYTHON={sys.executable}", f"IMAGE={image}", "REPLICAS=2"]
    env = {key: value for key, value in os.environ.items() if key != "MAKEFLAGS"}
    result = subprocess.run(
        [*command, f"ARGS={args}"], cwd=copy, env=env, capture_output=True, text=True, timeout=1500
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "workerpool0-0 | " in output and "workerpool1-0 | " in output, output[-6000:]
    model = (copy / "outputs/local/latest/model").resolve()
    assert model.is_dir() and any(model.iterdir()), "nothing exported:\n" + output[-4000:]
    assert "last metric the chief reported" in output, output[-4000:]
    (run,) = [line.split(" on network vt-")[1].split(";")[0] for line in output.splitlines()
              if " on network vt-" in line]  # fmt: skip
    for kind in (["ps", "--all"], ["network", "ls"]):
        left = docker(*kind, "--quiet", "--filter", f"label={containers.label(run)}")
        assert not left.stdout.strip(), f"left behind: {kind[0]} {left.stdout}"
