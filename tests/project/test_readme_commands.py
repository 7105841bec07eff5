"""Every command in the code blocks of the project's README.md and docs/trainer.md is run by a
test exactly as written, with its defaults.

Commands that work offline run here, in a copy of the project. The others are run by the test
named below (against stand-ins for Vertex, gcloud and docker where they need them: the project's
own tests, vertex-trainer-tools' tests or another of the template's tests), or need Google Cloud
itself. A new command in those files is run here unless one of those rules places it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import COPY_IGNORE, PROJECT, copy_with_latest_job

HERE = Path(__file__).resolve().parent
# The files whose shell blocks are run.
DOCS = ("README.md", "docs/trainer.md")
# Run by another test, against a stand-in: a test file of the project (``tests/...``) or of this
# folder (``tests/project/...``), both checked to exist, vertex-trainer-tools' own tests, or the
# template's suite.
ELSEWHERE = [
    (r"^make install$", "the template's suite: a fresh venv runs `make install`"),
    (r"^make test(-all)?$", "the template's suite runs `make test` and `make test-all`"),
    (r"--model-name-or-path=[\w.-]+/", "tests/test_pytorch_readme_hub.py (an offline Hub cache)"),
    (r"^make train-local$", "`make demo` runs it; tests/project/test_readme_local_run.py checks"),
    (r"^make train-local\b(?!.*\bIMAGE=)", "tests/project/test_readme_local_run.py"),
    (r"^vertex-tools local-run --help$", "tests/project/test_readme_local_run.py"),
    (r"^make report$", "tests/project/test_readme_local_run.py"),
    (r"^make tune-local\b", "tests/project/test_readme_tune_local.py"),
    (
        r"^make (gcp-setup|build-push)$",
        "vertex-trainer-tools' tests/test_build.py (stand-ins for gcloud and docker)",
    ),
    (r"\bIMAGE=|^make test-docker\b", "tests/test_docker_image.py and the template's image tests"),
    (r"^make (base-image|build)\b", "the template's image tests (a Docker engine)"),
    (
        r"^make (submit|submit-hpt)$",
        "vertex-trainer-tools' tests/test_submit.py (the Vertex REST stand-in)",
    ),
    (
        r"^make upload-model '?JOB=|^make submit UPLOAD=1$",
        "vertex-trainer-tools' tests/test_model_upload.py (the Vertex REST stand-in)",
    ),
]
# Need Google Cloud itself: credentials, a bucket, BigQuery.
CLOUD_ONLY = r"^gcloud |gs://|bq://"


def readme_commands() -> list[str]:
    """Each command of the docs' shell blocks: continuations joined, comments dropped."""
    text = "\n".join((PROJECT / name).read_text(encoding="utf-8") for name in DOCS)
    commands = []
    for block in re.findall(r"```(?:bash|sh|shell)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            command = shlex.join(shlex.split(line, comments=True))
            if command not in commands:
                commands.append(command)
    return commands


def placement(command: str) -> str:
    """``run``, ``cloud`` or the name of the test that runs the command elsewhere."""
    if re.search(CLOUD_ONLY, command):
        return "cloud"
    for pattern, where in ELSEWHERE:
        if re.search(pattern, command):
            return where
    return "run"


# The README's "After training" commands that read the newest local job's model.
AFTER_TRAINING = ("make upload-model", "make predict-local")
COMMANDS = readme_commands()
RUN_HERE = [command for command in COMMANDS if placement(command) == "run"]


def test_every_command_is_run_here_or_by_a_named_test():
    assert RUN_HERE, "the docs show no command that runs offline"
    for command in COMMANDS:
        where = placement(command)
        named = re.match(r"tests/(project/)?\w+\.py", where)
        if named:
            folder = HERE.parent.parent if named.group(1) else PROJECT
            test_file = folder / named.group()
            assert test_file.is_file(), f"{command!r}: {test_file} does not exist"
    assert any(c.startswith("make train-local") for c in COMMANDS), "no make train-local shown"


def test_the_after_training_section_serves_registers_and_chains():
    """Each command of it runs: offline here (after a local training), the cloud ones by the
    named tests against the Vertex REST stand-in."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = text.split("## After training", 1)[1].split("\n## ", 1)[0]
    shown = [command for command in COMMANDS if command in section]
    # Run here exactly as written, after a local training (test_readme_command_runs_as_written).
    offline = ["make predict-local INSTANCES=docs/instances.json", "make upload-model DRY_RUN=1"]
    for command in offline:
        assert command in shown and command in RUN_HERE, command
    # Against the Vertex REST stand-in, by the package's tests/test_model_upload.py.
    assert "make submit UPLOAD=1" in shown and placement("make submit UPLOAD=1") != "run"


def test_local_run_commands_are_the_ones_its_test_runs():
    """Quick-start and section commands are the same strings, run by test_readme_local_run."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_readme_local_run import COMMANDS as LOCAL_RUN_COMMANDS

    for command in COMMANDS:
        if placement(command) == "tests/project/test_readme_local_run.py":
            assert command in LOCAL_RUN_COMMANDS, f"{command!r} is run by no test"


def run(command: str, project: Path) -> subprocess.CompletedProcess:
    """``command`` through bash in ``project``, with this test's Python as ``python``."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = sys.executable  # the Makefile's PYTHON ?= python
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):  # as typed in a shell, not a sub-make
        env.pop(name, None)
    result = subprocess.run(
        ["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, (
        f"{command} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


@pytest.mark.slow
@pytest.mark.parametrize("command", RUN_HERE)
def test_readme_command_runs_as_written(tmp_path, command):
    project = tmp_path / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=COPY_IGNORE)
    if "outputs/local/latest" in command or command.startswith(AFTER_TRAINING):
        copy_with_latest_job(project)  # it reads the model of a previous local run
    result = run(command, project)
    if command.startswith("make predict-local INSTANCES="):  # Vertex's response, one per instance
        instances = json.loads((project / command.split("INSTANCES=")[1].split()[0]).read_text())
        predictions = json.loads(result.stdout)["predictions"]
        assert len(predictions) == len(instances["instances"]), result.stdout[-2000:]
    if command == "make submit DRY_RUN=1":
        request = json.loads(result.stdout)
        assert request["jobSpec"]["workerPoolSpecs"], "no worker pool in the request"
    if command == "make upload-model DRY_RUN=1":  # the newest job's model, as Vertex gets it
        from google.cloud import aiplatform_v1

        request = aiplatform_v1.UploadModelRequest.from_json(result.stdout)
        assert request.model.labels["job_id"] and request.model.container_spec.image_uri
    if command == "make gcp-setup DRY_RUN=1":
        assert result.stdout.rstrip().endswith("(dry run: nothing was changed)")
    if command.startswith("python -m trainer.task") and "--job-dir=" in command:
        job_dir = project / command.split("--job-dir=")[1].split()[0]
        assert (job_dir / "model").is_dir(), f"no model under {job_dir}"
