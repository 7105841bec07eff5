"""A fresh machine's `make install` resolves each variant's requirements without backtracking.

pip's resolver backtracks when the newest release of a dependency conflicts with another pin:
the Keras project's TensorFlow keeps protobuf < 5, and pip used to download 48 grpcio-status
and 15 google-api-core releases (minutes) before it found ones that accept it. The bounds in the
generated requirements-dev.txt name them; this resolves what `make install` asks for in a fresh
venv (its own pip), with pip's report, and fails on any backtracking. Needs the package index.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import FRAMEWORKS, TEMPLATE, pip_env

pytestmark = pytest.mark.index

BACKTRACKING = "pip is looking at multiple versions"
# "Downloading grpcio_status-1.62.3-py3-none-any.whl" or "Using cached ...": a release fetched
# from the index (a local find-links file is "Processing", once for each package that needs it).
FETCHED = re.compile(r"^\s*(?:Downloading|Using cached) (?:\S*/)?([A-Za-z0-9_.]+?)-\d")


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """A new venv with the pip that Python's ensurepip brings, as `make demo` makes one."""
    venv = tmp_path_factory.mktemp("resolve") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv / "bin" / "python"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_make_install_resolves_without_backtracking(baked, fresh_python, tmp_path, framework):
    project = baked({"framework": framework, "base_image": "deep-learning-container"})
    report = tmp_path / "report.json"
    command = [str(fresh_python), "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--report", str(report), "-r", "requirements.txt", "-r", "requirements-dev.txt"]
    # As `make demo` passes TOOLS_SOURCE and RUNTIME_SOURCE.
    command += [str(TEMPLATE / "vertex-trainer-tools"), str(TEMPLATE / "vertex-trainer-runtime")]
    result = subprocess.run(
        command, cwd=project, env=pip_env(), capture_output=True, text=True, timeout=900
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert report.is_file()
    fetched = Counter(
        match.group(1).lower().replace("_", "-")
        for line in output.splitlines()
        if (match := FETCHED.match(line))
    )
    several = {name: count for name, count in fetched.items() if count > 1}
    assert BACKTRACKING not in output and several == {}, several or output[-4000:]
