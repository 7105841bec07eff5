"""``make lock`` then ``make install`` in a fresh venv, as a user does, with uv on PATH (this
suite's own, as ``requirements-dev.txt`` puts it in a project's venv): the lock, hashes checked,
nothing resolved for the trainer. pip takes the same branch of the Makefile with pip's own
``--require-hashes`` install, which the image tests run in every Dockerfile; a fresh ``make
install`` took 4 min 6 s with pip and 46 s with uv (the template's docs/what-it-takes.md).

The lock is made for this Python (``LOCK_PYTHON``), so that ``make install`` takes it; for the
image's Python (3.10) it says it resolves instead, which the generated tests' ``make demo`` runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vertex_trainer_tools import lock as lock_lib

from conftest import CONSTRAINTS, TEMPLATE, bake

pytestmark = [pytest.mark.index, pytest.mark.variant("xgboost")]
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
UV_FOLDER = os.path.dirname(lock_lib.uv_command()[0]) if lock_lib.uv_command() else ""


def make(project: Path, *args: str, path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_CONSTRAINT": str(CONSTRAINTS)}
    if path:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["make", "--no-print-directory", *args], cwd=project, env=env,
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def installed(python: Path) -> dict[str, str]:
    listed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; "
         "print('\\n'.join(f'{d.name.lower()}=={d.version}' for d in m.distributions()))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return dict(line.split("==") for line in listed)


def test_make_install_takes_the_lock_with_uv(tmp_path):
    project = bake(tmp_path, framework="xgboost", accelerator_type="NONE", accelerator_count="0")
    tools = f"TOOLS_SOURCE={TEMPLATE / 'vertex-trainer-tools'}"
    runtime = f"RUNTIME_SOURCE={TEMPLATE / 'vertex-trainer-runtime'}"
    make(project, "lock", f"LOCK_PYTHON={HERE}", f"PYTHON={sys.executable}")
    pins = {
        name: lines[0].split("==")[1].split()[0]
        for name, lines, _ in lock_lib.parse_blocks((project / "requirements.lock").read_text())
    }
    assert "xgboost-cpu" in pins and "numpy" in pins

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    started = time.monotonic()
    result = make(project, "install", f"PYTHON={python}", tools, runtime, path=UV_FOLDER)
    print(f"\nmake install from the lock with uv: {time.monotonic() - started:.0f} s")
    assert "make install: requirements.lock, hashes checked" in result.stdout
    assert "Using Python" in result.stderr + result.stdout, "uv installed it"
    found = installed(python)
    assert {name: found.get(name) for name in pins} == pins


def test_make_install_says_it_resolves_where_the_lock_is_for_another_python(tmp_path):
    project = bake(tmp_path, framework="xgboost", accelerator_type="NONE", accelerator_count="0")
    (project / "requirements.lock").write_text(
        f"# python: 3.9\n# requirements.txt sha256: {lock_lib.requirements_hash(project)}\n"
    )
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "install", f"PYTHON={sys.executable}"],
        cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "make install: $why: resolving requirements.txt" in result.stdout
    why = subprocess.run(
        ["make", "--no-print-directory", "install", "PYTHON=" + sys.executable, "PIP_INSTALL=true"],
        cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    expected = f"requirements.lock is for the image's Python 3.9, this is {HERE}"
    assert f"make install: {expected}: resolving requirements.txt for this Python" in why.stdout
