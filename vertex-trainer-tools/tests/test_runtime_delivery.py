"""vertex-trainer-runtime reaches every place the trainer runs: its wheel in the image's build
context (``vertex-tools build``), its sdist beside the trainer's in package mode, and its
modules in the project after ``vertex-tools eject-runtime``.

The project copies pin the runtime installed here (``requirements.txt``), as a baked project
does; the wheel and sdist are built from whatever modules the installed package holds.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from fake_vertex import FakeGoogleCloud
from submit_helpers import make, offline_env, pin_runtime, project_copy, submit_in_process
from vertex_trainer_tools import cli, runtime_package
from vertex_trainer_tools import lock as lock_lib
from vertex_trainer_tools import submit as submit_lib
from vertex_trainer_tools.errors import USAGE

VERSION = importlib.metadata.version(runtime_package.DISTRIBUTION)
MODULE = runtime_package.MODULE
WHEEL = f"{MODULE}-{VERSION}-py3-none-any.whl"


def installed_modules() -> dict[str, bytes]:
    """The installed runtime's files, by path inside the package."""
    folder = runtime_package.module_folder()
    return {
        f"{MODULE}/{path.relative_to(folder).as_posix()}": path.read_bytes()
        for path in folder.rglob("*.py")
    }


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    copy = project_copy(tmp_path)
    pin_runtime(copy)
    monkeypatch.delenv(runtime_package.SOURCE_ENV, raising=False)
    monkeypatch.setenv("VERTEX_TOOLS_PROJECT", str(copy))
    monkeypatch.chdir(copy)
    return copy


def run_tools(capsys, *argv: str) -> tuple[int, str, list[str]]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if "ERROR" in line]


# --- the image ---------------------------------------------------------------------------------


def test_image_wheel_is_the_installed_runtime_at_the_pinned_version(project, monkeypatch):
    source = runtime_package.source_folder(
        importlib.metadata.distribution("vertex-trainer-runtime")
    )
    before = sorted(p.relative_to(source) for p in source.rglob("*")) if source else []
    stale = project / "wheels" / f"{MODULE}-0.0.1-py3-none-any.whl"
    stale.parent.mkdir()
    stale.write_bytes(b"older")

    wheel = runtime_package.image_wheel(project)
    assert wheel == project / "wheels" / WHEEL
    assert sorted(p.name for p in (project / "wheels").iterdir()) == [WHEEL], "one runtime wheel"
    with zipfile.ZipFile(wheel) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    assert {n: files.get(n) for n in installed_modules()} == installed_modules()
    metadata = files[f"{MODULE}-{VERSION}.dist-info/METADATA"].decode()
    assert f"Version: {VERSION}\n" in metadata
    if source:  # built from a copy: the source folder gets no build/ or egg-info
        assert sorted(p.relative_to(source) for p in source.rglob("*")) == before

    # A released runtime comes from the index: the wheel goes, as when nothing pins it.
    with monkeypatch.context() as patch:
        patch.setattr(runtime_package, "is_released", lambda dist: True)
        assert runtime_package.image_wheel(project) is None
    assert not list((project / "wheels").iterdir())
    pin_runtime(project, "")
    assert runtime_package.pinned(project) is None
    assert runtime_package.image_wheel(project) is None


def test_build_puts_the_wheel_in_the_context_before_docker_builds(project, tmp_path, monkeypatch):
    docker = tmp_path / "docker"
    seen = tmp_path / "seen"
    docker.write_text(
        f'#!/bin/sh\n[ "$1" = build ] && ls wheels > {seen}\n'
        '[ "$1" = buildx ] && exit 1\n[ "$1" = build ] && [ "$2" = --help ] && echo --platform\n'
        "exit 0\n"
    )
    docker.chmod(0o755)
    monkeypatch.setenv("DOCKER", str(docker))
    digest = lock_lib.requirements_hash(project)  # as `make lock` leaves it (test_lock.py)
    (project / lock_lib.LOCK).write_text(f"# python: 3.10\n# requirements.txt sha256: {digest}\n")
    assert cli.main(["build", "--tag=t1"]) == 0
    assert seen.read_text().split() == [WHEEL]


def test_a_pin_of_another_version_is_one_line(project, capsys):
    pin_runtime(project, f"{runtime_package.DISTRIBUTION}==99.0")
    code, _, lines = run_tools(capsys, "build", "--dry-run", "--tag=t1")
    assert code == USAGE
    assert lines == [
        f"ERROR: requirements.txt: {runtime_package.DISTRIBUTION}==99.0 but this Python has "
        f"{runtime_package.DISTRIBUTION} {VERSION}: run `make install`"
    ]
    assert not (project / "wheels").exists()


def test_the_installed_files_build_alone_when_no_source_folder_is_known(project, monkeypatch):
    """A runtime installed from a wheel (a git URL, an index): its files and metadata."""
    monkeypatch.setattr(runtime_package, "source_folder", lambda dist: None)
    dist = importlib.metadata.distribution(runtime_package.DISTRIBUTION)
    wheel = runtime_package.build(dist, "wheel", project / "out")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"{MODULE}-{VERSION}.dist-info/METADATA").decode()
    assert set(installed_modules()) <= names
    assert f"Version: {VERSION}\n" in metadata
    assert set(dist.requires or []) <= {
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    }


def test_pyproject_from_metadata_keeps_dependencies_and_extras():
    class Installed:
        version = "1.2.3"
        metadata = {"Name": "vertex-trainer-runtime", "Summary": 'a "quoted" summary'}
        requires = [
            "packaging>=23",
            'cloudml-hypertune; extra == "hypertune"',
            'google-cloud-aiplatform>=1.60; python_version >= "3.10" and extra == "cloud"',
        ]

    import tomllib

    data = tomllib.loads(runtime_package.pyproject_from_metadata(Installed()))["project"]
    assert (data["name"], data["version"]) == ("vertex-trainer-runtime", "1.2.3")
    assert data["description"] == 'a "quoted" summary'
    assert data["dependencies"] == ["packaging>=23"]
    assert data["optional-dependencies"] == {
        "hypertune": ["cloudml-hypertune"],
        "cloud": ['google-cloud-aiplatform>=1.60; python_version >= "3.10"'],
    }


# --- package mode --------------------------------------------------------------------------------


def test_package_mode_uploads_the_runtime_sdist_before_the_trainer_s(  # dry run: test_submit
    project, tmp_path, monkeypatch, capsys
):
    submit = submit_in_process(project, tmp_path, monkeypatch, capsys)
    with FakeGoogleCloud() as server:
        code, out, err = submit("--package", "--no-sync", "--skip-remote-checks", server=server)
    assert code == 0, err
    (body,) = server.created("customJobs")
    uris = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    assert [uri.rsplit("/", 1)[1] for uri in uris] == [
        f"{MODULE}-{VERSION}.tar.gz",
        "vertex_trainer-0.1.0.tar.gz",
    ]
    assert set(uris) <= set(server.uploads)
    with tarfile.open(project / "dist" / f"{MODULE}-{VERSION}.tar.gz") as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {f"src/{name}" for name in installed_modules()} <= names
    assert "pyproject.toml" in names


def test_package_mode_without_a_runtime_pin_sends_the_trainer_only(project, monkeypatch):
    pin_runtime(project, "")
    monkeypatch.setattr(submit_lib, "build_sdist", lambda folder, into: into / "trainer.tar.gz")
    sdists = submit_lib.package_sdists(project, project / "dist")
    assert sdists == [project / "dist" / "trainer.tar.gz"]


# --- eject-runtime -------------------------------------------------------------------------------


def tracked(project: Path) -> dict[str, str]:
    return {
        name: (project / name).read_text()
        for name in ["setup.py", "requirements.txt", "Dockerfile"]
    }


def test_eject_copies_the_runtime_into_the_project_and_the_build_carries_it(project, capsys):
    before = tracked(project)
    code, out, lines = run_tools(capsys, "eject-runtime")
    assert code == 0 and not lines, lines
    copied = {
        f"{MODULE}/{p.relative_to(project / MODULE).as_posix()}": p.read_bytes()
        for p in (project / MODULE).rglob("*.py")
    }
    assert copied == installed_modules()
    after = tracked(project)
    assert runtime_package.pinned(project) is None
    assert after["requirements.txt"].splitlines() == [
        line
        for line in before["requirements.txt"].splitlines()
        if "vertex-trainer-runtime" not in line
    ]
    lines = after["Dockerfile"].splitlines()
    assert lines[lines.index("COPY trainer/ trainer/") + 1] == f"COPY {MODULE}/ {MODULE}/"
    assert f'"{MODULE}", "{MODULE}.*"' in after["setup.py"]
    assert max(map(len, after["setup.py"].splitlines())) <= 100, "as ruff formats it"
    assert not list(project.glob(f".{MODULE}-*")), "no scratch folder left"

    sdist = submit_lib.build_sdist(project, project / "dist")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert set(copied) <= names, "the trainer's sdist carries the ejected runtime"
    assert runtime_package.image_wheel(project) is None, "no wheel: the image copies the folder"

    # The copy is what the project imports: a change to it shows up.
    init = project / MODULE / "__init__.py"
    init.write_text(init.read_text() + '\nEJECTED_MARKER = "changed in the project"\n')
    shown = subprocess.run(
        [sys.executable, "-c", f"import {MODULE} as r; print(r.EJECTED_MARKER, r.__file__)"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["changed", "in", "the", "project", str(init)]

    # Once is enough: a second eject is refused and changes nothing.
    code, _, lines = run_tools(capsys, "eject-runtime")
    assert code == USAGE
    assert lines == [f"ERROR: {MODULE}/: the runtime is already ejected into {project}"]
    assert tracked(project) == after


def test_eject_refuses_to_overwrite_and_writes_nothing(project, capsys):
    (project / MODULE).mkdir()
    (project / MODULE / "mine.py").write_text("MINE = 1\n")
    before = tracked(project)
    code, _, lines = run_tools(capsys, "eject-runtime")
    assert code == USAGE
    assert lines == [f"ERROR: {MODULE}/: already in {project}; move it away, then rerun"]
    assert tracked(project) == before
    assert [p.name for p in (project / MODULE).iterdir()] == ["mine.py"]


def test_eject_refuses_a_dockerfile_it_cannot_extend_and_writes_nothing(project, capsys):
    dockerfile = project / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("COPY trainer/ trainer/", "COPY . ."))
    before = tracked(project)
    code, _, lines = run_tools(capsys, "eject-runtime")
    assert code == USAGE
    assert lines == [
        f"ERROR: Dockerfile: no `COPY trainer/ trainer/` line to add `COPY {MODULE}/ {MODULE}/` "
        "after: add it yourself, then rerun"
    ]
    assert tracked(project) == before and not (project / MODULE).exists()


def test_make_eject_runtime_runs_the_command(project, tmp_path):
    run = make(project, offline_env(tmp_path), "eject-runtime")
    assert run.returncode == 0, run.stderr
    assert (project / MODULE / "__init__.py").is_file()
    assert run.stdout.startswith(f"Ejected {runtime_package.DISTRIBUTION} {VERSION} into {MODULE}/")


def test_a_failure_while_ejecting_puts_back_what_was_written(project, capsys, monkeypatch):
    before = tracked(project)

    def refuse(self, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "rename", refuse)
    code, _, lines = run_tools(capsys, "eject-runtime")
    assert code == 1
    assert lines == ["ERROR: ejecting the runtime failed: [Errno 28] No space left on device"]
    assert tracked(project) == before and not (project / MODULE).exists()
    assert not list(project.glob(f".{MODULE}-*")), "no scratch folder left"
