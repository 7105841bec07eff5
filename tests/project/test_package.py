"""Python-package mode: the sdists `make submit PACKAGE=1` uploads (the trainer's, and before it
vertex-trainer-runtime's when requirements.txt pins it) install in a fresh venv and ``python -m
trainer.task --help`` runs from the installed copy, as on Vertex's prebuilt container (which
pip-installs every package URI and runs the module). After ``make eject-runtime`` the trainer's
sdist alone carries the runtime, and the trainer runs the project's changed copy.

To stay cheap and offline, the fresh venv gets the packages only (``--no-deps``); the already
installed dependencies are made visible through a ``.pth`` path file (never the project folder).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from vertex_trainer_tools import runtime_package
from vertex_trainer_tools import submit as submit_lib

from conftest import COPY_IGNORE, PROJECT

RUNTIME = runtime_package.DISTRIBUTION
MODULE = runtime_package.MODULE


def requirements() -> set[str]:
    """requirements.txt less the framework (torch, tensorflow, the XGBoost build), which the
    environment provides, and the runtime, whose sdist is sent beside (setup.py)."""
    lines = (PROJECT / "requirements.txt").read_text().splitlines()
    wanted = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    left_out = ("xgboost", "xgboost-cpu", "torch", "tensorflow", RUNTIME)
    return {line for line in wanted if Requirement(line).name.lower() not in left_out}


def canonical(requirement: str) -> tuple[str, str, str]:
    parsed = Requirement(requirement)
    return parsed.name.lower().replace("_", "-"), str(parsed.specifier), str(parsed.marker or "")


def sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        return {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}


def fresh_venv(sdists: list[Path], tmp_path: Path) -> tuple[Path, list[Path]]:
    """A new venv with the sdists installed, in their order, from wheels this environment's
    setuptools builds (no index); this environment's packages visible after its own."""
    wheels = tmp_path / "wheels"
    for sdist in sdists:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "--no-index", "-w", str(wheels), str(sdist)],
            check=True, timeout=300,
        )  # fmt: skip
    built = [next(wheels.glob(sdist.name.removesuffix(".tar.gz") + "-*.whl")) for sdist in sdists]
    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", *map(str, built)],
        check=True, timeout=300,
    )  # fmt: skip
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "dependencies.pth").write_text("\n".join(here) + "\n")
    return python, built


def imported_from(python: Path, module: str, cwd: Path) -> str:
    return subprocess.run(
        [str(python), "-c", f"import {module}; print({module}.__file__)"],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def trainer_help(python: Path, cwd: Path) -> None:
    run = subprocess.run(
        [str(python), "-m", "trainer.task", "--help"],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "--train-data" in run.stdout and "--job-dir" in run.stdout


@pytest.mark.slow
def test_sdist_installs_in_a_fresh_venv_and_runs_the_trainer(tmp_path):
    sdists = submit_lib.package_sdists(PROJECT, tmp_path / "dist")
    *sent_beside, sdist = sdists
    names = sdist_names(sdist)
    shipped = {p.relative_to(PROJECT).as_posix() for p in (PROJECT / "trainer").glob("*.py")}
    assert shipped <= names, "every trainer module is in the sdist"
    assert {"setup.py", "requirements.txt"} <= names
    pinned = runtime_package.pinned(PROJECT) is not None
    assert [s.name.split("-")[0] for s in sent_beside] == ([MODULE] if pinned else [])

    python, wheels = fresh_venv(sdists, tmp_path)
    with zipfile.ZipFile(wheels[-1]) as archive:
        top = {name.split("/", 1)[0] for name in archive.namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"trainer"}, "installs trainer only"
    metadata = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, sys; "
         "print('\\n'.join(m.requires(sys.argv[1]) or []))", wheels[-1].name.split("-")[0]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    declared = {canonical(line) for line in metadata.splitlines() if line.strip()}
    assert {canonical(line) for line in requirements()} <= declared
    assert RUNTIME not in {name for name, _, _ in declared}, "the runtime is sent beside"

    fresh = python.parent.parent
    where = imported_from(python, "trainer", tmp_path)
    assert where.startswith(str(fresh)), f"trainer imported from {where}, not the fresh venv"
    if sent_beside:  # the runtime the trainer imports is the one sent beside it
        where = imported_from(python, MODULE, tmp_path)
        assert where.startswith(str(fresh)), f"{MODULE} imported from {where}"
    trainer_help(python, tmp_path)


@pytest.mark.slow
def test_an_ejected_runtime_travels_in_the_trainer_sdist_and_its_changes_run(tmp_path):
    try:
        importlib.metadata.version(RUNTIME)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"this environment has no {RUNTIME} to eject (make install installs it)")
    project = tmp_path / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=COPY_IGNORE)
    eject = subprocess.run(
        ["make", "--no-print-directory", "eject-runtime", f"PYTHON={sys.executable}"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert eject.returncode == 0, eject.stderr
    assert runtime_package.pinned(project) is None, "requirements.txt still pins the runtime"
    dockerfile = (project / "Dockerfile").read_text().splitlines()
    assert f"COPY {MODULE}/ {MODULE}/" in dockerfile
    init = project / MODULE / "__init__.py"
    init.write_text(init.read_text() + '\nEJECTED_MARKER = "changed in the project"\n')

    sdists = submit_lib.package_sdists(project, tmp_path / "dist")
    assert len(sdists) == 1 and f"{MODULE}/__init__.py" in sdist_names(sdists[0])
    python, _ = fresh_venv(sdists, tmp_path)
    shown = subprocess.run(
        [str(python), "-c", f"import trainer.task, {MODULE} as r; print(r.__file__); "
         "print(r.EJECTED_MARKER)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    where, marker = shown.stdout.splitlines()
    assert where.startswith(str(python.parent.parent)) and marker == "changed in the project"
    trainer_help(python, tmp_path)
