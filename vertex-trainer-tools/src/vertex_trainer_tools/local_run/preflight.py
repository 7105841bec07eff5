"""Check once, before any replica starts, that this Python can run the trainer.

Outside the project's environment every replica would print the same ModuleNotFoundError and
be restarted five times. The check is free when every distribution in requirements.txt is
installed; only when one seems missing does it import the trainer in a subprocess of the same
interpreter (the authority: a package may be installed under another name) and, if that
fails, it names the interpreter, the missing module and the fix in one line.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

IMPORT_TIMEOUT_SECONDS = 120
FIX = "run `make install` in a venv and use PYTHON=.venv/bin/python"


def required_distributions(requirements: Path) -> list[str]:
    """Distribution names of a requirements file (no versions, extras or markers)."""
    names = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            names.append(Requirement(line).name)
        except InvalidRequirement:
            continue  # pip reports it when installing; this check only looks for the names
    return names


def missing_distributions(requirements: Path) -> list[str]:
    missing = []
    for name in required_distributions(requirements):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def import_problem(module: str, cwd: Path, python: str = sys.executable) -> str:
    """'' when ``python -c 'import MODULE'`` works in ``cwd``, else its error's last line."""
    try:
        result = subprocess.run(
            [python, "-c", f"import {module}"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=IMPORT_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return f"importing {module} took over {IMPORT_TIMEOUT_SECONDS}s"
    if result.returncode == 0:
        return ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {result.returncode}"


def check(project: Path, module: str = "trainer.train", python: str = sys.executable) -> str:
    """'' when ``python`` can run the trainer, else one ``ERROR: ...`` line."""
    requirements = project / "requirements.txt"
    if requirements.is_file() and not missing_distributions(requirements):
        return ""
    problem = import_problem(module, project, python)
    if not problem:
        return ""
    missing = re.search(r"No module named '([^']+)'", problem)
    what = missing.group(1).split(".")[0] if missing else f"{module} ({problem})"
    return f"ERROR: {python} cannot import {what}: {FIX}"
