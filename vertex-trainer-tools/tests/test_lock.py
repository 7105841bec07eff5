"""``make lock``: uv resolves requirements.txt for the image's Python and platform, and the lock
pins every package with the hashes of its files, less what the base image brings.

The packages are tiny wheels made here and found offline (``UV_NO_INDEX``, ``UV_FIND_LINKS``):
``app`` needs ``shared`` and ``framework``; ``framework`` (the base's, like torch) needs
``shared`` and ``cuda-libs``, which nothing else needs.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from vertex_trainer_tools import lock as lock_lib
from vertex_trainer_tools.errors import ToolError

PACKAGES = {
    "app": ["shared>=1", "framework>=2"],
    "shared": [],
    "framework": ["shared", "cuda-libs"],
    "cuda-libs": [],
    "app-gpu": ["shared>=1"],
}


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal pure-Python wheel: metadata and an empty module."""
    module = name.replace("-", "_")
    path = folder / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)
        ),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for arcname, text in files.items():
            archive.writestr(arcname, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
            record.append(f"{arcname},sha256={digest.decode()},{len(text)}")
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    if lock_lib.uv_command() is None:
        pytest.skip("no uv (pip install uv)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, requires in PACKAGES.items():
        for version in ("1.0", "2.0"):
            wheel(wheels, name, version, requires)
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    root = tmp_path / "project"
    root.mkdir()
    (root / "requirements.txt").write_text("# the trainer's\napp>=1\n")
    return root


def pins(project: Path) -> dict[str, list[str]]:
    blocks = lock_lib.parse_blocks((project / lock_lib.LOCK).read_text())
    return {lines[0].split(" ")[0]: [h.strip(" \\") for h in lines[1:]] for _, lines, _ in blocks}


def test_the_lock_pins_every_package_with_the_hashes_of_its_files(project, tmp_path):
    assert lock_lib.lock_problem(project).startswith("requirements.lock: missing: run `make lock`")
    lock_lib.lock(project, "3.10", lock_lib.PLATFORM, [], [])
    wheels = tmp_path / "wheels"
    expected = {
        f"{name}==2.0": [
            "--hash=sha256:"
            + hashlib.sha256(
                (wheels / f"{name.replace('-', '_')}-2.0-py3-none-any.whl").read_bytes()
            ).hexdigest()
        ]
        for name in ("app", "cuda-libs", "framework", "shared")
    }
    assert pins(project) == expected
    head = lock_lib.header(project)
    assert head["python"] == "3.10" and head["platform"] == lock_lib.PLATFORM
    assert lock_lib.lock_problem(project) == ""
    with (project / "requirements.txt").open("a") as requirements:
        requirements.write("shared<2\n")
    assert "requirements.txt changed after the lock was made" in lock_lib.lock_problem(project)


def test_what_the_base_brings_is_left_out_with_what_only_it_needs(project):
    """framework==2.0 comes with the base (as torch with the Deep Learning Containers): the lock
    resolves against it and leaves out it and cuda-libs, but keeps shared, which app needs."""
    lock_lib.lock(project, "3.11", lock_lib.PLATFORM, ["framework==2.0"], [])
    assert set(pins(project)) == {"app==2.0", "shared==2.0"}
    assert lock_lib.header(project)["from the base image"] == "framework==2.0 cuda-libs"


def test_replace_locks_the_other_build_at_the_same_version(project):
    (project / "requirements.txt").write_text("app~=1.0\n")
    lock_lib.lock(project, "3.10", lock_lib.PLATFORM, [], ["app=app-gpu"])
    assert set(pins(project)) == {"app-gpu==1.0", "shared==2.0"}


@pytest.mark.parametrize(
    ("python", "replace", "error"),
    [
        ("3", [], "--python (LOCK_PYTHON=): '3': a Python version like 3.10"),
        ("3.10", ["app"], "--replace: 'app': OLD=NEW, e.g. xgboost-cpu=xgboost"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(project, python, replace, error):
    with pytest.raises(ToolError) as raised:
        lock_lib.lock(project, python, lock_lib.PLATFORM, [], replace)
    assert str(raised.value) == error and not (project / lock_lib.LOCK).exists()


def test_an_unresolvable_requirement_is_one_line_and_keeps_the_old_lock(project):
    lock_lib.lock(project, "3.10", lock_lib.PLATFORM, [], [])
    before = (project / lock_lib.LOCK).read_text()
    (project / "requirements.txt").write_text("app>=9\n")
    with pytest.raises(ToolError) as raised:
        lock_lib.lock(project, "3.10", lock_lib.PLATFORM, [], [])
    (line,) = str(raised.value).splitlines()
    assert line.startswith("make lock: uv could not resolve requirements.txt: ")
    assert (project / lock_lib.LOCK).read_text() == before
