"""Checks of a generated project that belong to the template, not to the user's tests: every
command its README and docs show runs as written, and its sdist installs and runs.

``tests/test_generated.py`` runs them with the project's own Python, after ``make demo``:

    PROJECT_UNDER_TEST=<project> DEMO_OUTPUT=<file> <project>/.venv/bin/python -m pytest \
        -c tests/project/pytest.ini

``DEMO_OUTPUT`` holds what ``make demo`` printed: it ran the README's ``make train-local`` in
this project, whose job the README checks here read instead of training again.

The template's own run (``make test``) does not collect this folder (``norecursedirs``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(os.environ["PROJECT_UNDER_TEST"]).resolve()
DEMO_OUTPUT = Path(os.environ["DEMO_OUTPUT"])
# What a copy of the project leaves out: the user's outputs, builds, environments and caches.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", "outputs", "dist", "build", "*.egg-info", "__pycache__", ".*_cache", ".venv", "venv"
)


def copy_with_latest_job(project: Path) -> Path:
    """Give the copy ``project`` the demo's newest local job (``make demo`` ran ``make
    train-local``), as a user's folder has it after training: no second training run."""
    jobs = PROJECT / "outputs" / "local"
    latest = (jobs / "latest").resolve()
    assert latest.is_dir(), f"{jobs}/latest: the demo left no job"
    target = project / "outputs" / "local"
    shutil.copytree(latest, target / latest.name, symlinks=True)
    shutil.copy2(jobs / "latest", target / "latest", follow_symlinks=False)
    return (target / "latest").resolve()


def run_as_typed(command: str, project: Path, timeout: float = 1500) -> subprocess.CompletedProcess:
    """``command`` as a user types it in ``project``, with this test's Python first on PATH and
    as the Makefile's PYTHON; it must succeed."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    env["PYTHON"] = sys.executable  # the Makefile's PYTHON ?= python
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):  # as typed in a shell, not a sub-make
        env.pop(name, None)
    result = subprocess.run(
        shlex.split(command), cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{command} exited {result.returncode}\n{result.stdout[-5000:]}\n{result.stderr[-3000:]}"
    )
    return result
