"""Each framework's baked project installs in a fresh virtual environment and passes its own
``make lint``, ``make test``, ``make test-all`` and ``make train-local``, exactly as a user would
run them (``make test-all`` includes the generated README's local-run commands, run as written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FRAMEWORKS, bake, pip_env

# One fresh environment and test run per framework; several minutes each.
pytestmark = pytest.mark.generated


def run(command: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    result = subprocess.run(
        command, cwd=cwd, env=pip_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{' '.join(command)} failed ({result.returncode}):\n"
        f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    )
    return result


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_generated_project_installs_lints_tests_and_trains(tmp_path, framework):
    project = bake(tmp_path, framework=framework)
    venv = project / ".venv"
    run([sys.executable, "-m", "venv", str(venv)], project, timeout=120)
    python = f"PYTHON={venv / 'bin' / 'python'}"
    run(["make", "install", python], project, timeout=1200)
    run(["make", "lint", python], project, timeout=300)
    for target in ("test", "test-all"):
        tests = run(["make", target, python], project, timeout=2400)
        assert " passed" in tests.stdout and " failed" not in tests.stdout
    run(["make", "train-local", python], project, timeout=600)
    model_dir = project / "outputs" / "local" / "latest" / "model"
    assert model_dir.is_dir() and any(model_dir.iterdir()), "train-local exported no model"
