"""``make demo`` for each framework, exactly as the README shows it (in a folder of the test's
own), then the demo project's own ``make lint``, ``make test`` and ``make test-all`` in the fresh
virtual environment the demo made, as a user would run them; and, in that environment, the
template's checks of a generated project (``tests/project/``): every command of the generated
README and docs run as written, and the sdist installed and run. (The runtime's tests of the
framework's subpackage run in a venv of their own: tests/test_runtime_suites.py.) The demo is
conftest's ``fresh_demo``, one per framework and session: the two tests here and
tests/test_resolve.py read the same install."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FRESH_DEMO_FRAMEWORKS, ONE_THREAD, TEMPLATE, children_cpu_seconds, pip_env

# One fresh environment and test run per framework; several minutes each.
pytestmark = pytest.mark.generated


def run(command: list[str], cwd: Path, timeout: int, **env: str) -> subprocess.CompletedProcess:
    env = {**pip_env(), **ONE_THREAD, **env}
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert_succeeded(result)
    return result


def assert_succeeded(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (
        f"{' '.join(result.args)} failed ({result.returncode}):\n"
        f"{result.stdout[-20000:]}\n{result.stderr[-6000:]}"
    )


class Timings:
    """Each phase's wall and CPU time and its pytest runs' slowest tests (``--durations``, set
    through ``PYTEST_ADDOPTS`` so that the commands stay the user's), for the template's
    summary. The suite keeps both cores busy, so CPU seconds, not wall, say what a phase costs."""

    DURATION = re.compile(r"^\d+\.\d+s (?:call|setup|teardown) .*$", re.M)

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env = {"PYTEST_ADDOPTS": "--durations=6"}

    def add(self, phase: str, seconds: float, cpu_seconds: float, output: str = "") -> None:
        self.lines.append(f"  {seconds:6.0f} s {cpu_seconds:6.0f} CPU s  {phase}")
        self.lines += [f"           {line}" for line in self.DURATION.findall(output)]

    def run(self, phase: str, command: list[str], cwd: Path, timeout: int, **env: str):
        started, cpu = time.monotonic(), children_cpu_seconds()
        result = run(command, cwd, timeout, **self.env, **env)
        self.add(phase, time.monotonic() - started, children_cpu_seconds() - cpu, result.stdout)
        return result


@pytest.mark.parametrize("framework", FRESH_DEMO_FRAMEWORKS)
def test_demo_then_the_projects_own_lint_and_test_tiers(fresh_demo, framework, record_property):
    timed(demo_then_tiers, fresh_demo, framework, record_property)


# In the template's CI a job of its own for a variant whose one job would run too long.
@pytest.mark.project_checks
@pytest.mark.parametrize("framework", FRESH_DEMO_FRAMEWORKS)
def test_the_template_checks_of_the_demo_project_pass(fresh_demo, framework, record_property):
    timed(template_checks, fresh_demo, framework, record_property)


def timed(phases, fresh_demo, framework: str, record_property) -> None:
    """Run ``phases`` and record where its time went, failed or not."""
    timings = Timings()
    try:
        phases(fresh_demo, framework, timings)
    finally:
        record_property("timings", "\n".join(timings.lines))


def checked_demo(fresh_demo, framework: str, timings: Timings):
    demo = fresh_demo(framework)
    phase = "make demo (a fresh venv, make install, make train-local)"
    timings.add(phase, demo.seconds, demo.cpu_seconds)
    assert_succeeded(demo.result)
    return demo


def demo_then_tiers(fresh_demo, framework: str, timings: Timings) -> None:
    demo = checked_demo(fresh_demo, framework, timings)
    project = demo.project
    assert f"cd {project} && . .venv/bin/activate" in demo.result.stdout, "no next steps printed"
    python = f"PYTHON={project / '.venv' / 'bin' / 'python'}"
    timings.run("make lint", ["make", "lint", python], project, timeout=300)
    env = {}
    if framework != "xgboost":
        # tests/test_images.py builds and trains every variant's image (with local wheels, and
        # with more drills than the project's own image tests): building the Keras image a second
        # time here costs minutes, and the PyTorch image's build installs torch from
        # download.pytorch.org, which this machine cannot reach. The XGBoost project's own image
        # tests run here, as a user runs them (its image builds in about a minute).
        env["TEST_BASE_IMAGE"] = "absent/base:see-tests-test_images"
    # make test-all runs make test (the fast tier) first, then the other tiers but GPU.
    command = ["make", "test-all", python]
    tests = timings.run("make test-all", command, project, timeout=2400, **env)
    summaries = re.findall(r"^=+ .*\b\d+ passed.* =+$", tests.stdout, re.M)
    assert len(summaries) == 2 and " failed" not in tests.stdout, tests.stdout[-3000:]


def template_checks(fresh_demo, framework: str, timings: Timings) -> None:
    """tests/project/ in the demo's venv: the generated README's and docs' commands as written,
    the sdist installed and run."""
    demo = checked_demo(fresh_demo, framework, timings)
    project = demo.project
    checks = TEMPLATE / "tests" / "project"
    command = [str(project / ".venv" / "bin" / "python"), "-m", "pytest", "-n", "auto"]
    command += ["-c", str(checks / "pytest.ini"), str(checks)]
    # The demo ran the README's `make train-local`: tests/project checks its job from its output.
    demo_output = project.parent / "make-demo.out"
    demo_output.write_text(demo.result.stdout, encoding="utf-8")
    project_env = {"PROJECT_UNDER_TEST": str(project), "DEMO_OUTPUT": str(demo_output)}
    tests = timings.run("tests/project", command, project, timeout=2400, **project_env)
    assert " passed" in tests.stdout and " failed" not in tests.stdout
