"""Shared fixtures: bake the template the way a user does, with an isolated cookiecutter config."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((TEMPLATE / "cookiecutter.json").read_text())
FRAMEWORKS = CONTEXT["framework"]
BASE_IMAGES = CONTEXT["base_image"]
PROJECT_TEMPLATE = TEMPLATE / "{{cookiecutter.project_slug}}"
# A pip constraints file for every environment the suite builds: torch must resolve to the
# local CPU build, never to a CUDA build from the index.
CONSTRAINTS = TEMPLATE / "tests" / "constraints.txt"


def bake(output_dir: Path, **answers: str) -> Path:
    """Generate a project non-interactively and return its folder."""
    project = cookiecutter(
        str(TEMPLATE),
        no_input=True,
        extra_context=answers,
        output_dir=str(output_dir),
        default_config=True,
    )
    return Path(project)


def combinations() -> list[dict[str, str]]:
    """The supported answer combinations, built from cookiecutter.json's choice lists.

    Framework and base image interact (different Dockerfiles), so they are multiplied; a
    CPU-only machine is cycled in once per framework because it changes the rendered images.
    """
    cases = []
    for framework in FRAMEWORKS:
        for base_image in BASE_IMAGES:
            cases.append({"framework": framework, "base_image": base_image})
        cases.append(
            {
                "framework": framework,
                "base_image": BASE_IMAGES[0],
                "accelerator_type": "NONE",
                "accelerator_count": "0",
                "machine_type": "n1-standard-4",
            }
        )
    return cases


def case_id(case: dict[str, str]) -> str:
    gpu = "cpu" if case.get("accelerator_type") == "NONE" else "gpu"
    return f"{case['framework']}-{case['base_image']}-{gpu}"


@pytest.fixture(scope="session")
def baked(tmp_path_factory):
    """Bake each combination once per session: ``baked(case) -> project folder``."""
    cache: dict[str, Path] = {}

    def get(case: dict[str, str]) -> Path:
        key = case_id(case)
        if key not in cache:
            cache[key] = bake(tmp_path_factory.mktemp(key), **case)
        return cache[key]

    return get


def pip_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PIP_CONSTRAINT"] = str(CONSTRAINTS)
    env.pop("VIRTUAL_ENV", None)
    return env


# This suite runs a process per core already (pytest -n auto): one OpenMP thread each, as the
# projects' own conftest sets, or their threads wait on each other (PyTorch steps 10x slower).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def children_cpu_seconds() -> float:
    """CPU time (user + system) of this process's finished children and theirs: a phase's CPU
    is the difference over it (a Docker container's is the engine's, not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Demo:
    """One ``make demo``: its project, its output, pip's report of its ``make install``."""

    project: Path
    result: subprocess.CompletedProcess
    pip_report: Path
    seconds: float
    cpu_seconds: float


@pytest.fixture(scope="session")
def fresh_demo(tmp_path_factory):
    """``fresh_demo(framework) -> Demo``: ``make demo`` as the README shows it (a fresh venv,
    the project's ``make install``, ``make train-local``), once per framework and session.

    Two tests read the one install, a few minutes each: tests/test_generated.py runs the
    project's tiers in its venv, tests/test_resolve.py checks that pip resolved it without
    backtracking (pip writes its report, ``PIP_REPORT``). A failed demo is kept too, so that
    the second test reports it instead of running it again; each test checks what it needs."""
    demos: dict[str, Demo] = {}

    def get(framework: str) -> Demo:
        if framework not in demos:
            folder = tmp_path_factory.mktemp(f"demo-{framework}")
            report = folder / "pip-report.json"
            command = ["make", "--no-print-directory", "demo", f"FRAMEWORK={framework}"]
            started, cpu = time.monotonic(), children_cpu_seconds()
            result = subprocess.run(
                [*command, f"DEMO_DIR={folder}"],
                cwd=TEMPLATE,
                env={**pip_env(), **ONE_THREAD, "PIP_REPORT": str(report)},
                capture_output=True,
                text=True,
                timeout=2400,
            )
            seconds, cpu = time.monotonic() - started, children_cpu_seconds() - cpu
            demos[framework] = Demo(folder / "vertex_trainer", result, report, seconds, cpu)
        return demos[framework]

    return get


# The framework parameter of the tests that read ``fresh_demo(framework)``: each framework's
# tests are one xdist group, so they run on one worker and share one demo.
FRESH_DEMO_FRAMEWORKS = [
    pytest.param(framework, marks=pytest.mark.xdist_group(f"fresh-venv-{framework}"))
    for framework in FRAMEWORKS
]


# Minutes each, against seconds for the rest. pytest-xdist (--dist loadgroup) hands out the
# units with the most tests first (an xdist group counts as one unit: the image group's 6 tests,
# then each framework's fresh-venv group of 2), one per worker, and one more to a worker with at
# most 2 tests pending; among units of one size this order decides. With 2 workers one runs
# the image group, the other PyTorch's group and, fetched at once, Keras's (898 + 812 s of the
# 1772 s CI run of 2026-11-27: the shortest split of the four); XGBoost's goes to the first
# worker left with 2 tests pending (at CI's timings the image worker, 5 image tests in).
LONGEST_FIRST = ["images", "generated[pytorch]", "generated[keras]", "generated[xgboost]"]


def pytest_addoption(parser):
    parser.addoption(
        "--variant",
        action="append",
        choices=["none", *FRAMEWORKS],
        help="run only the tests of this variant (none: the tests of no variant); repeatable. "
        "The template's CI runs each as a job of its own.",
    )


def item_variant(item) -> str:
    """The variant a test checks: its ``variant`` mark, else the framework it is parametrized
    with (a ``framework`` value or an answers dict's); "none" for the template's own tests."""
    mark = item.get_closest_marker("variant")
    if mark:
        return mark.args[0]
    callspec = getattr(item, "callspec", None)
    for value in callspec.params.values() if callspec else ():
        if isinstance(value, dict):
            value = value.get("framework")
        if isinstance(value, str) and value in FRAMEWORKS:
            return value
    return "none"


def deselect_other_variants(config, items) -> None:
    wanted = config.getoption("--variant")
    if not wanted:
        return
    deselected = [item for item in items if item_variant(item) not in wanted]
    config.hook.pytest_deselected(items=deselected)
    items[:] = [item for item in items if item_variant(item) in wanted]


def pytest_collection_modifyitems(config, items):
    deselect_other_variants(config, items)

    def rank(item) -> int:
        for position, name in enumerate(LONGEST_FIRST):
            marker, _, framework = name.partition("[")
            wanted = not framework or f"[{framework}" in item.nodeid
            if item.get_closest_marker(marker) and wanted:
                return position
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept


def pytest_configure(config):
    """pytest-xdist 3.8 keeps an ``xdist_group`` on one worker by adding ``@<group>`` to each
    test's id, which pytest 9.2 ignores: the image tests then spread over both workers and each
    builds every image again. Refuse that pair at the start rather than run twice as long."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    xdist = tuple(int(part) for part in version("pytest-xdist").split(".")[:2])
    if pytest.version_tuple[:2] >= (9, 2) and xdist <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {version('pytest-xdist')}: "
            "--dist loadgroup would not keep tests/test_images.py on one worker; "
            "install requirements-dev.txt (pytest<9.2)"
        )


# Tests that run whole projects record where their minutes went (``record_property("timings",
# ...)``): printed at the end of the run, as pytest-xdist brings the reports of every worker.
def pytest_terminal_summary(terminalreporter):
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    timings = [
        (report.nodeid, value)
        for report in reports
        for name, value in getattr(report, "user_properties", [])
        if name == "timings" and report.when == "call"
    ]
    if timings:
        terminalreporter.section("where the generated projects' time went")
        for nodeid, value in timings:
            terminalreporter.write_line(f"{nodeid}:\n{value}")
