"""Python-package mode: the sdist `make submit PACKAGE=1` uploads installs in a fresh venv
and ``python -m trainer.task --help`` runs from the installed copy, as on Vertex's prebuilt
container (which pip-installs the sdist and runs the module).

To stay cheap and offline, the fresh venv gets the package only (``--no-deps``); the already
installed dependencies are made visible through a ``.pth`` path file (never the project folder).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from vertex_trainer_tools import submit as submit_lib

from conftest import PROJECT


def requirements() -> set[str]:
    """requirements.txt less the framework (torch, tensorflow, the XGBoost build), which the
    environment provides (see setup.py)."""
    lines = (PROJECT / "requirements.txt").read_text().splitlines()
    wanted = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    framework = ("xgboost", "xgboost-cpu", "torch", "tensorflow")
    return {line for line in wanted if Requirement(line).name.lower() not in framework}


def canonical(requirement: str) -> tuple[str, str, str]:
    parsed = Requirement(requirement)
    return parsed.name.lower().replace("_", "-"), str(parsed.specifier), str(parsed.marker or "")


@pytest.mark.slow
def test_sdist_installs_in_a_fresh_venv_and_runs_the_trainer(tmp_path):
    sdist = submit_lib.build_sdist(PROJECT, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    shipped = {p.relative_to(PROJECT).as_posix() for p in (PROJECT / "trainer").glob("*.py")}
    assert shipped <= names, "every trainer module is in the sdist"
    assert {"setup.py", "requirements.txt"} <= names

    # Build the wheel with this environment's setuptools, install it alone in a new venv.
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(sdist)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/", 1)[0] for name in archive.namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"trainer"}, "installs trainer only"
    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    metadata = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, sys; "
         "print('\\n'.join(m.requires(sys.argv[1]) or []))", wheel.name.split("-")[0]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    declared = {canonical(line) for line in metadata.splitlines() if line.strip()}
    assert {canonical(line) for line in requirements()} <= declared

    # The dependencies this environment already has, after the fresh venv's own packages.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "dependencies.pth").write_text("\n".join(here) + "\n")

    where = subprocess.run(
        [str(python), "-c", "import trainer; print(trainer.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(fresh)), f"trainer imported from {where}, not the fresh venv"
    run = subprocess.run(
        [str(python), "-m", "trainer.task", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "--train-data" in run.stdout and "--job-dir" in run.stdout
