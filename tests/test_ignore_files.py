"""Secrets stay out of git, the Docker build context and the Cloud Build upload; what the
build needs stays in.

The Docker context is computed with docker-py's ``exclude_paths``, which implements the
engine's .dockerignore rules (Go filepath.Match patterns, ``**``, ``!`` exceptions), since no
Docker engine is needed to know what it would send.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths

from conftest import bake

# Names a service-account key, certificate or environment file is commonly saved under.
SECRETS = [
    "key.json",
    "sa-key.json",
    "trainer_key.json",
    "my-gcp-project-1a2b3c4d5e6f.json",  # gcloud iam service-accounts keys create's default
    "service-account.json",
    "service-account-prod.json",
    "service_account.json",
    "application_default_credentials.json",
    "gcp-credentials.json",
    "sa.json.key",
    "private.key",
    "server.pem",
    "keystore.p12",
    "cert.pfx",
    ".env",
    ".env.production",
]
# Where they land: the project root and folders at any depth.
FOLDERS = ["", "trainer/", "configs/gcp/"]
# Files of the user's own that happen to be JSON: they must not be swallowed by the patterns.
OWN_FILES = ["configs/params.json", "trainer/labels.json", "keyboard.json", "monkey-keys.json"]
# What the Dockerfile copies, and what the build reads.
BUILD_NEEDS = ["Dockerfile", "setup.py", "MANIFEST.in", "requirements.txt", "pyproject.toml"]
BUILD_NEEDS += ["requirements.lock"]  # `make lock` writes it; committed with the project


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A baked project with secrets and the user's own files dropped into it."""
    root = bake(tmp_path_factory.mktemp("ignore"), framework="xgboost")
    (root / "requirements.lock").write_text("# make lock\n")
    for name in [folder + secret for folder in FOLDERS for secret in SECRETS] + OWN_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('{"private_key": "-----BEGIN PRIVATE KEY-----"}\n')
    return root


def secret_paths() -> set[str]:
    return {folder + secret for folder in FOLDERS for secret in SECRETS}


def baked_files(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and path.relative_to(root).as_posix() not in secret_paths()
    }


def test_git_add_stages_no_secret_and_every_project_file(project):
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=project, check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, env=env)
    staged = set(
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=project, check=True, capture_output=True, env=env
        )
        .stdout.decode()
        .split("\0")
    ) - {""}
    shutil.rmtree(project / ".git")
    assert staged & secret_paths() == set()
    # Everything else, the project's own files and the user's JSON files, is committed.
    assert staged == baked_files(project)


def docker_context(root: Path) -> set[str]:
    """The files ``docker build`` sends, read from .dockerignore the way docker-py reads it."""
    lines = (root / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    included = exclude_paths(str(root), patterns, dockerfile="Dockerfile")
    return {path for path in included if (root / path).is_file()}


def test_docker_context_has_no_secret_and_what_the_build_needs(project):
    context = docker_context(project)
    assert context & secret_paths() == set()
    assert set(BUILD_NEEDS) <= context
    trainer = {name for name in baked_files(project) if name.startswith("trainer/")}
    assert trainer and trainer <= context
    assert set(OWN_FILES) <= context


def gcloud_patterns(root: Path, name: str = ".gcloudignore") -> list[str]:
    """.gcloudignore with its ``#!include:`` lines expanded (gitignore syntax, per gcloud)."""
    patterns = []
    for line in (root / name).read_text().splitlines():
        if line.startswith("#!include:"):
            patterns += gcloud_patterns(root, line.removeprefix("#!include:").strip())
        elif line.strip() and not line.startswith("#"):
            patterns.append(line)
    return patterns


def test_cloud_build_upload_has_no_secret_and_what_the_build_needs(project, tmp_path):
    # git check-ignore applies gitignore semantics, which gcloud follows; an empty repository
    # keeps the project's own .gitignore out of the judgement.
    rules = tmp_path / "gcloudignore"
    rules.write_text("\n".join(gcloud_patterns(project)) + "\n")
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    candidates = sorted(secret_paths() | baked_files(project))
    result = subprocess.run(
        ["git", "-c", f"core.excludesFile={rules}", "check-ignore", "--no-index", "--stdin"],
        cwd=tmp_path / "repo",
        input="\n".join(candidates) + "\n",
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    ignored = set(result.stdout.splitlines())
    assert secret_paths() <= ignored
    uploaded = set(candidates) - ignored
    assert set(BUILD_NEEDS) | {".dockerignore"} <= uploaded
    assert {name for name in uploaded if name.startswith("trainer/")} == {
        name for name in baked_files(project) if name.startswith("trainer/")
    }


def test_the_runtime_wheel_goes_to_docker_and_cloud_build_never_to_git(project, tmp_path):
    """`make build` writes the runtime's wheel to wheels/ (see the Dockerfile's COPY wheel[s])."""
    wheel = "wheels/vertex_trainer_runtime-0.1.0-py3-none-any.whl"
    (project / "wheels").mkdir()
    try:
        (project / wheel).write_bytes(b"PK")
        (project / "wheels/notes.txt").write_text("not for the image\n")
        context = docker_context(project)
        assert wheel in context and "wheels/notes.txt" not in context
        subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
        rules = {
            "gcloud": "\n".join(gcloud_patterns(project)) + "\n",
            "git": (project / ".gitignore").read_text(),
        }
        ignored = {}
        for name, text in rules.items():
            (tmp_path / name).write_text(text)
            check = ["git", "-c", f"core.excludesFile={tmp_path / name}", "check-ignore"]
            found = subprocess.run([*check, "--no-index", "-q", wheel], cwd=tmp_path / "repo")
            ignored[name] = found.returncode == 0
        assert ignored == {"gcloud": False, "git": True}, "Cloud Build uploads it, git leaves it"
    finally:
        shutil.rmtree(project / "wheels")
