"""make build / push / build-push / gcp-setup, with fake docker and gcloud executables that
record their arguments (and, for gcloud, remember what they created). The fake docker plays
the Docker a user may have: with or without buildx, a client without ``--platform`` (Debian's
docker.io 20.10), no engine running, a failing build or push (``FAKE_DOCKER_*`` variables)."""

from __future__ import annotations

import copy
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT
from vertex_trainer_tools import lock as lock_lib
from vertex_trainer_tools import testing

RAW = yaml.safe_load((PROJECT / "vertex.yaml").read_text())
COPY_IGNORE = shutil.ignore_patterns(
    ".git", "outputs", "dist", "build", "*.egg-info", "__pycache__", ".*_cache", ".venv", "venv"
)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}
FAKE_CLI = """#!PYTHON
import json, os, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\\n")
path = os.environ["FAKE_STATE"]
state = json.load(open(path)) if os.path.exists(path) else dict(buckets=dict(), repos=[])
if name == "gcloud" and args[:2] == ["storage", "buckets"]:
    bucket = args[3]
    if args[2] == "describe":
        if bucket not in state["buckets"]:
            sys.exit(1)
        print(state["buckets"][bucket])
    elif args[2] == "create":
        location = [a for a in args if a.startswith("--location=")][0].split("=", 1)[1]
        state["buckets"][bucket] = location.upper()
if name == "gcloud" and args[:2] == ["artifacts", "repositories"]:
    if args[2] == "describe" and args[3] not in state["repos"]:
        sys.exit(1)
    if args[2] == "create":
        state["repos"].append(args[3])
if name == "docker":
    fake = lambda key, default="1": os.environ.get("FAKE_DOCKER_" + key, default)
    if args[:1] == ["version"]:
        if fake("ENGINE") == "0":
            sys.exit("Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
                     " Is the docker daemon running?")
        print("20.10.24")
    if args[:1] == ["buildx"] and fake("BUILDX") == "0":
        sys.exit("docker: 'buildx' is not a docker command.")
    if args[:1] == ["build"]:
        if "--help" in args:
            print("Usage:  docker build [OPTIONS] PATH")
            print("      --platform string   Set platform" if fake("PLATFORM") == "1" else "")
        elif fake("PLATFORM") == "0" and any(a.startswith("--platform") for a in args):
            print("unknown flag: --platform", file=sys.stderr)
            sys.exit(125)
    if args[:2] == ["buildx", "build"] or (args[:1] == ["build"] and "--help" not in args):
        if fake("FAIL", "") == "build":
            sys.exit(1)
    if args[:1] == ["push"] and fake("FAIL", "") == "push":
        sys.exit(1)
json.dump(state, open(path, "w"))
"""
PROBES = (["version"], ["buildx", "version"], ["build", "--help"])


def write_lock(project: Path) -> None:
    """A requirements.lock whose header matches requirements.txt, as `make lock` leaves it."""
    digest = lock_lib.requirements_hash(project)
    (project / lock_lib.LOCK).write_text(f"# python: 3.10\n# requirements.txt sha256: {digest}\n")


class Fakes:
    """A project copy in a git repository, fake executables on PATH and their call log."""

    def __init__(self, tmp_path: Path):
        self.project = tmp_path / "project"
        shutil.copytree(PROJECT, self.project, ignore=COPY_IGNORE)
        data = copy.deepcopy(RAW)
        data.update(
            project="demo-project-123",
            staging_bucket="gs://demo-bucket",
            base_output_dir="gs://demo-bucket/runs",
        )
        self.write_config(data)
        write_lock(self.project)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for name in ("docker", "gcloud"):
            script = self.bin / name
            script.write_text(FAKE_CLI.replace("PYTHON", sys.executable, 1))
            script.chmod(0o755)
        self.log = tmp_path / "calls.jsonl"
        self.state = tmp_path / "state.json"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MAKEFLAGS", "MFLAGS"))},
            **GIT_ENV,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "FAKE_LOG": str(self.log),
            "FAKE_STATE": str(self.state),
        }
        self.git("init", "-q")
        self.git("add", "-A")
        self.git("commit", "-qm", "initial")

    def write_config(self, data: dict) -> None:
        (self.project / "vertex.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args],
            cwd=self.project,
            env={**os.environ, **GIT_ENV},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def make(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"],
            cwd=self.project,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls(self) -> list[list[str]]:
        """The commands that act, without build's probes of what this Docker supports."""
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [c for c in calls if not any(c[1 : 1 + len(p)] == p for p in PROBES)]

    def image(self, tag: str) -> str:
        get = [sys.executable, "-m", "vertex_trainer_tools", "get", "image_repository"]
        repository = subprocess.run(
            get, cwd=self.project, capture_output=True, text=True, check=True
        ).stdout.strip()
        return f"{repository}:{tag}"


@pytest.fixture
def fakes(tmp_path) -> Fakes:
    return Fakes(tmp_path)


def test_build_push_builds_amd64_with_git_sha_and_latest_and_pushes(fakes):
    run = fakes.make("build-push")
    assert run.returncode == 0, run.stderr
    sha = fakes.git("rev-parse", "--short=12", "HEAD")
    call, *pushes = fakes.calls()
    assert call[:3] == ["docker", "buildx", "build"]
    assert "--platform=linux/amd64" in call and "--load" in call and call[-1] == "."
    assert f"--tag={fakes.image(sha)}" in call and f"--tag={fakes.image('latest')}" in call
    assert not any(arg.startswith("--build-arg") for arg in call), "the Dockerfile default"
    assert "+ docker buildx build" in run.stdout, "each command is printed"
    assert sorted(pushes) == sorted(["docker", "push", fakes.image(t)] for t in (sha, "latest"))


def test_build_then_push_and_base_image_override(fakes):
    (fakes.project / "vertex.yaml").write_text(
        (fakes.project / "vertex.yaml").read_text() + "\n"
    )  # a changed tracked file: the SHA tag says so
    run = fakes.make("build", "BASE_IMAGE=local/base:1")
    assert run.returncode == 0, run.stderr
    sha = fakes.git("rev-parse", "--short=12", "HEAD")
    (build,) = fakes.calls()
    assert "--build-arg=BASE_IMAGE=local/base:1" in build and "--load" in build
    assert f"--tag={fakes.image(sha + '-dirty')}" in build
    run = fakes.make("push", "TAG=v7")
    assert run.returncode == 0, run.stderr
    pushes = fakes.calls()[1:]
    assert [call[:2] for call in pushes] == [["docker", "push"]] * 2
    assert {call[2] for call in pushes} == {fakes.image("v7"), fakes.image("latest")}


@pytest.mark.parametrize("how", ["CLOUD_BUILD=1", "DOCKER=no-such-docker"])
def test_cloud_build_when_asked_or_without_docker(fakes, how):
    name, value = how.split("=")
    run = fakes.make("build-push", **{name: value})
    assert run.returncode == 0, run.stderr
    (call,) = fakes.calls()
    assert call[:3] == ["gcloud", "builds", "submit"]
    assert "--config=build/cloudbuild.yaml" in call and call[-1] == "."
    assert "--project=demo-project-123" in call
    cloudbuild = yaml.safe_load((fakes.project / "build/cloudbuild.yaml").read_text())
    sha = fakes.git("rev-parse", "--short=12", "HEAD")
    assert set(cloudbuild["images"]) == {fakes.image(sha), fakes.image("latest")}
    (step,) = cloudbuild["steps"]
    assert "--platform=linux/amd64" in step["args"]
    assert f"--tag={fakes.image(sha)}" in step["args"]


def test_build_dry_run_only_prints(fakes):
    run = fakes.make("build-push", "DRY_RUN=1")
    assert run.returncode == 0, run.stderr
    assert fakes.calls() == []
    assert "docker buildx build --platform=linux/amd64" in run.stdout
    assert "docker push" in run.stdout


def test_build_refuses_the_placeholder_project(fakes):
    fakes.write_config({**RAW, "project": "my-gcp-project"})
    run = fakes.make("build-push")
    assert run.returncode != 0
    assert "placeholder" in run.stderr and fakes.calls() == []


@pytest.mark.parametrize("how", ["missing", "stale"])
def test_build_refuses_an_image_without_its_lock_in_one_line(fakes, how):
    """The image installs requirements.lock: without it (or with one older than
    requirements.txt) the build would fail or install what the lock no longer says."""
    if how == "missing":
        (fakes.project / lock_lib.LOCK).unlink()
    else:
        with (fakes.project / "requirements.txt").open("a") as requirements:
            requirements.write("pyyaml>=6\n")
    run = fakes.make("build-push")
    assert run.returncode != 0 and fakes.calls() == []
    (error,) = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
    assert error.startswith("ERROR: requirements.lock: ") and "run `make lock`" in error
    dry = fakes.make("build", "DRY_RUN=1")
    assert dry.returncode == 0 and "WARNING: requirements.lock: " in dry.stderr


def test_gcp_setup_creates_what_is_missing_once(fakes):
    first = fakes.make("gcp-setup")
    assert first.returncode == 0, first.stderr
    calls = fakes.calls()
    assert calls[0][:3] == ["gcloud", "services", "enable"]
    assert {"aiplatform.googleapis.com", "artifactregistry.googleapis.com"} <= set(calls[0])
    assert "cloudbuild.googleapis.com" in calls[0]
    region = RAW["region"]
    created = [c for c in calls if "create" in c]
    assert ["gcloud", "storage", "buckets", "create", "gs://demo-bucket"] == created[0][:5]
    assert f"--location={region}" in created[0]
    assert created[1][:4] == ["gcloud", "artifacts", "repositories", "create"]
    assert "--repository-format=docker" in created[1]
    assert calls[-1][:3] == ["gcloud", "auth", "configure-docker"]
    assert "+ gcloud services enable" in first.stdout, "each command is printed"

    before = len(fakes.calls())
    second = fakes.make("gcp-setup")
    assert second.returncode == 0, second.stderr
    assert not [c for c in fakes.calls()[before:] if "create" in c], "idempotent"


def test_gcp_setup_refuses_a_bucket_in_another_region(fakes):
    fakes.state.write_text(json.dumps({"buckets": {"gs://demo-bucket": "EU"}, "repos": []}))
    run = fakes.make("gcp-setup")
    assert run.returncode != 0
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert "gs://demo-bucket exists in EU" in line


def test_gcp_setup_dry_run_prints_only(fakes):
    run = fakes.make("gcp-setup", "DRY_RUN=1")
    assert run.returncode == 0, run.stderr
    assert fakes.calls() == []
    assert "gcloud storage buckets create gs://demo-bucket" in run.stdout
    assert "gcloud auth configure-docker" in run.stdout
    # It says what it would do, and never that it is done.
    assert "Done." not in run.stdout
    plan = "Would do: enable 4 APIs in project demo-project-123; create bucket gs://demo-bucket"
    assert plan in run.stdout
    assert run.stdout.rstrip().endswith("(dry run: nothing was changed)")


def test_build_without_buildx_uses_docker_build_with_platform(fakes):
    run = fakes.make("build", FAKE_DOCKER_BUILDX="0")
    assert run.returncode == 0, run.stderr
    (call,) = fakes.calls()
    assert call[:2] == ["docker", "build"] and "--platform=linux/amd64" in call
    assert "--load" not in call, "a buildx flag the classic builder rejects"


def test_build_on_a_client_without_platform_flag_builds_plain_on_amd64(fakes):
    """Debian's docker.io 20.10 without buildx: `unknown flag: --platform` before the fix."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("plain docker build is amd64 only on an amd64 machine")
    run = fakes.make(
        "build", "BASE_IMAGE=local/base:1", FAKE_DOCKER_BUILDX="0", FAKE_DOCKER_PLATFORM="0"
    )
    assert run.returncode == 0, run.stderr
    (call,) = fakes.calls()
    assert call[:2] == ["docker", "build"]
    assert not any(arg.startswith("--platform") for arg in call)
    assert "--build-arg=BASE_IMAGE=local/base:1" in call


@pytest.mark.parametrize(
    "env, cause",
    [
        ({"FAKE_DOCKER_ENGINE": "0"}, "no Docker engine answers (Cannot connect to the Docker"),
        ({"FAKE_DOCKER_FAIL": "build"}, "the image build (docker buildx) failed (exit code 1)"),
    ],
)
def test_build_failure_names_its_cause_without_a_push_hint(fakes, env, cause):
    run = fakes.make("build-push", **env)
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and cause in errors[0], run.stderr
    assert "gcp-setup" not in run.stderr and "push" not in errors[0]
    assert not [c for c in fakes.calls() if c[1] == "push"], "nothing pushed after a failure"


def test_push_failure_hints_at_gcp_setup(fakes):
    run = fakes.make("build-push", FAKE_DOCKER_FAIL="push")
    assert run.returncode != 0
    (error,) = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert "docker push" in error and "make gcp-setup" in error


def test_tag_is_a_timestamp_when_the_project_is_inside_another_repository(tmp_path):
    """The project baked inside another checkout: its SHA is not the project's."""
    outer = Fakes(tmp_path)  # a git repository ...
    inner = outer.project / "nested"
    shutil.copytree(PROJECT, inner, ignore=COPY_IGNORE)  # ... holding a project folder
    shutil.copy(outer.project / "vertex.yaml", inner / "vertex.yaml")
    write_lock(inner)
    run = subprocess.run(
        ["make", "--no-print-directory", "build", f"PYTHON={sys.executable}"],
        cwd=inner,
        env=outer.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    (call,) = outer.calls()
    sha = outer.git("rev-parse", "--short=12", "HEAD")
    tags = [arg.split(":")[-1] for arg in call if arg.startswith("--tag=")]
    assert not any(sha in tag for tag in tags)
    assert any(re.fullmatch(r"build-\d{8}-\d{6}", tag) for tag in tags), tags
    assert run.stderr.count("is not the top of its git repository") == 1


@pytest.mark.parametrize("how", [(), ("CLOUD_BUILD=1",)])
def test_a_reduction_server_builds_with_googles_nccl_plugin(fakes, how):
    # job.reduction_server in vertex.yaml -> --build-arg REDUCTION_SERVER=1 (the Dockerfile
    # then installs google-reduction-server), in a docker build and in cloudbuild.yaml alike.
    config = fakes.project / "vertex.yaml"
    testing.with_reduction_server(config, config)
    run = fakes.make("build", *how)
    assert run.returncode == 0, run.stderr
    (call,) = fakes.calls()
    if how:
        (step,) = yaml.safe_load((fakes.project / "build/cloudbuild.yaml").read_text())["steps"]
        call = step["args"]
    assert "--build-arg=REDUCTION_SERVER=1" in call
