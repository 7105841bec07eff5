"""Shared by the submit tests: a project copy with real-looking values, an offline environment,
the Makefile runner, strict proto parsing, and ``submit.main`` in-process (``cloud``)."""

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

import yaml
from google.protobuf import json_format

from conftest import PROJECT
from fake_vertex import FakeGoogleCloud

submit_lib = importlib.import_module("vertex_trainer_tools.submit")
cli = importlib.import_module("vertex_trainer_tools.cli")
cloud = importlib.import_module("vertex_trainer_tools.cloud")
image_dates = importlib.import_module("vertex_trainer_tools.image_dates")

RAW = yaml.safe_load((PROJECT / "vertex.yaml").read_text())
EXECUTOR = "us-docker.pkg.dev/vertex-ai/training/xgboost-cpu.2-1:latest"
EXECUTOR_AVAILABLE_ON = datetime.date(2026, 1, 1)  # before any named image's end of patch
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
    # The template names no executor (none left in image_dates.csv); package mode's requests
    # are built with the last XGBoost one, on a day it was available (submit_in_process).
    data["python_package"]["executor_image_uri"] = EXECUTOR
    return data


def project_copy(tmp_path) -> Path:
    """A copy of the generated project whose vertex.yaml has real-looking values."""
    copy_dir = tmp_path / "project"
    shutil.copytree(PROJECT, copy_dir, ignore=COPY_IGNORE)
    write_config(copy_dir, cloud_values(RAW))
    return copy_dir


def can_use_reduction_server(project: Path) -> None:
    """Declare the project's trainer (XGBoost's, which cannot) one that can use a Reduction
    Server, as the Keras and PyTorch trainers are: ``no_reduction_server=None``."""
    declared = project / "trainer" / "spec.py"
    declared.write_text(declared.read_text() + USES_REDUCTION_SERVER)


# Appended to trainer/spec.py: the declaration, as one that can use a Reduction Server.
USES_REDUCTION_SERVER = (
    "\nimport dataclasses\n\nSPEC = dataclasses.replace(SPEC, no_reduction_server=None)\n"
)


def pin_runtime(project: Path, line: str | None = None) -> None:
    """requirements.txt with ``line`` (default: the installed vertex-trainer-runtime's version
    pinned, as the template pins it) as its only requirement on the runtime; "" for none."""
    runtime = importlib.import_module("vertex_trainer_tools.runtime_package")
    if line is None:
        line = f"{runtime.DISTRIBUTION}=={runtime.installed().version}"
    path = project / "requirements.txt"
    pins = {number for number, _ in runtime.runtime_lines(project)}
    kept = [t for n, t in enumerate(path.read_text().splitlines()) if n not in pins]
    path.write_text("\n".join([*kept, line]) + "\n")


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


def submit_in_process(project, tmp_path, monkeypatch, capsys):
    """Run ``vertex-tools submit`` in-process in the project copy against a fresh stand-in."""
    for name in [n for n in os.environ if n.startswith(("GOOGLE_", "VERTEX_", "CLOUDSDK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(project)
    monkeypatch.setattr(image_dates, "today", lambda: EXECUTOR_AVAILABLE_ON)

    def submit(*argv: str, server: FakeGoogleCloud | None = None) -> tuple[int, str, str]:
        if server is not None:
            monkeypatch.setenv(cloud.ENDPOINT_ENV, server.url)
        else:
            monkeypatch.delenv(cloud.ENDPOINT_ENV, raising=False)
        code = cli.main(["submit", *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return submit
