"""Deliver the vertex-trainer-runtime package to every place the trainer runs.

The project's ``requirements.txt`` pins ``vertex-trainer-runtime``; the runtime installed in the
Python running the tools must be that version. It travels as follows:

- the image: ``vertex-tools build`` writes its wheel to ``wheels/`` (ignored by git, the only
  files of that folder in the Docker context), which the Dockerfile installs from the file
  before ``requirements.txt``, so pip never asks the index for it. A runtime installed from a
  package index is a released one: then no wheel is written and the image takes it from there;
- package mode: ``vertex-tools submit --package`` builds its sdist and sends it beside the
  trainer's, so a prebuilt container installs it from the job's own packages.

Both are built offline (no isolated build environment, this Python's setuptools) from a copy of
its source: the folder ``RUNTIME_SOURCE`` names, else the folder it was installed from (an
editable or local install), else the installed package's own files with its installed metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pyproject_hooks import quiet_subprocess_runner

from vertex_trainer_tools.errors import FAILED, ToolError

DISTRIBUTION = "vertex-trainer-runtime"
MODULE = "vertex_trainer_runtime"
REQUIREMENTS = "requirements.txt"
# The image's wheels, beside the Dockerfile: written by `vertex-tools build`, ignored by git.
WHEELS_DIR = "wheels"
# A folder holding the runtime's source (its pyproject.toml), the Makefile's RUNTIME_SOURCE.
SOURCE_ENV = "RUNTIME_SOURCE"
SKIPPED = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".git", ".*_cache", ".venv"
)


def runtime_lines(project: Path) -> list[tuple[int, Requirement]]:
    """(0-based line, requirement) of each line of requirements.txt that names the runtime."""
    path = project / REQUIREMENTS
    if not path.is_file():
        return []
    found = []
    for number, line in enumerate(path.read_text().splitlines()):
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue  # pip reports it when it reads the file
        if canonicalize_name(requirement.name) == DISTRIBUTION:
            found.append((number, requirement))
    return found


def pinned(project: Path) -> Requirement | None:
    """The project's requirement on the runtime (``requirements.txt``), or None when it has
    none: an ejected runtime (``vertex-tools eject-runtime``) is part of the trainer's package."""
    found = runtime_lines(project)
    return found[0][1] if found else None


def installed() -> importlib.metadata.Distribution:
    """The runtime installed beside the tools, whose version the project must pin."""
    try:
        return importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ToolError(
            f"{DISTRIBUTION} is not installed in this Python: run `make install`"
        ) from None


def checked_install(project: Path, requirement: Requirement) -> importlib.metadata.Distribution:
    """The installed runtime, refused unless it is the version requirements.txt pins."""
    dist = installed()
    if not requirement.specifier.contains(dist.version, prereleases=True):
        raise ToolError(
            f"{REQUIREMENTS}: {requirement} but this Python has {DISTRIBUTION} "
            f"{dist.version}: run `make install`"
        )
    return dist


def installed_from_folder(dist: importlib.metadata.Distribution) -> Path | None:
    """The local folder pip installed the runtime from (PEP 610 direct_url.json), if any."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    info = json.loads(text)
    url = info.get("url", "")
    if "dir_info" not in info or not url.startswith("file://"):
        return None
    folder = Path(url.removeprefix("file://"))
    return folder if (folder / "pyproject.toml").is_file() else None


def source_folder(dist: importlib.metadata.Distribution) -> Path | None:
    """``RUNTIME_SOURCE`` when it names a source folder, else the folder it was installed from."""
    named = os.environ.get(SOURCE_ENV, "").strip()
    if named and Path(named).is_dir():
        if not (Path(named) / "pyproject.toml").is_file():
            raise ToolError(f"{SOURCE_ENV}={named}: no pyproject.toml there")
        return Path(named)
    return installed_from_folder(dist)


def is_released(dist: importlib.metadata.Distribution) -> bool:
    """Installed from a package index (no direct URL, no source named): the index has it."""
    return not os.environ.get(SOURCE_ENV, "").strip() and dist.read_text("direct_url.json") is None


def module_folder() -> Path:
    """Where the installed runtime's modules are (an editable install's too)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ToolError(f"{MODULE}: not importable in this Python: run `make install`")
    return Path(list(spec.submodule_search_locations)[0])


def staged_source(dist: importlib.metadata.Distribution, into: Path) -> Path:
    """A buildable copy of the runtime: its source folder, else its installed files with a
    pyproject.toml written from its installed metadata."""
    folder = source_folder(dist)
    if folder is not None:
        shutil.copytree(folder, into, ignore=SKIPPED)
        return into
    shutil.copytree(module_folder(), into / "src" / MODULE, ignore=SKIPPED)
    (into / "pyproject.toml").write_text(pyproject_from_metadata(dist))
    return into


def pyproject_from_metadata(dist: importlib.metadata.Distribution) -> str:
    """pyproject.toml for the installed files: name, version, Python and dependencies (extras
    included) as the installed metadata says."""
    meta = dist.metadata
    core, extras = [], {}
    for line in dist.requires or []:
        requirement = Requirement(line)
        marker = str(requirement.marker or "")
        found = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if found is None:
            core.append(line)
            continue
        rest = marker.replace(found.group(0), "").strip()
        rest = re.sub(r"^\s*and\s+|\s+and\s*$", "", rest).strip("() ").strip()
        requirement.marker = None
        extras.setdefault(found.group(1), []).append(
            f"{requirement}; {rest}" if rest else str(requirement)
        )
    lines = [
        "[build-system]",
        'requires = ["setuptools>=64"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {json.dumps(meta['Name'])}",
        f"version = {json.dumps(dist.version)}",
        f"description = {json.dumps(meta.get('Summary') or '')}",
        f"requires-python = {json.dumps(meta.get('Requires-Python') or '>=3.10')}",
        f"dependencies = {json.dumps(core)}",
        "",
        "[project.optional-dependencies]",
        *[f"{json.dumps(name)} = {json.dumps(items)}" for name, items in extras.items()],
        "",
        "[tool.setuptools.packages.find]",
        'where = ["src"]',
    ]
    return "\n".join(lines) + "\n"


def build(dist: importlib.metadata.Distribution, kind: str, dist_dir: Path) -> Path:
    """The runtime's ``kind`` ("wheel" or "sdist") in ``dist_dir``, built offline from a copy
    of its source (the source folder is never written to), at the installed version."""
    dist_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vertex-trainer-runtime-") as scratch:
        source = staged_source(dist, Path(scratch) / "source")
        try:
            builder = ProjectBuilder(source, runner=quiet_subprocess_runner)
            missing = builder.check_dependencies(kind)
            if missing:
                needed = ", ".join(sorted(next(iter(group)) for group in missing))
                raise ToolError(
                    f"building {DISTRIBUTION}'s {kind} needs {needed}: pip install it",
                    exit_code=FAILED,
                )
            built = Path(builder.build(kind, Path(scratch) / "out"))
        except (BuildException, BuildBackendException) as error:
            raise ToolError(
                f"building {DISTRIBUTION}'s {kind} failed: {error}", exit_code=FAILED
            ) from None
        version = built.name.removesuffix(".tar.gz").split("-")[1]
        if version != dist.version:
            raise ToolError(
                f"{DISTRIBUTION}: its source ({source_folder(dist) or module_folder()}) is "
                f"version {version}, the installed one {dist.version}: run `make install`",
                exit_code=FAILED,
            )
        target = dist_dir / built.name
        shutil.move(built, target)
        return target


def sdist(project: Path, dist_dir: Path) -> Path | None:
    """The runtime's sdist for package mode, when the project pins the runtime."""
    requirement = pinned(project)
    if requirement is None:
        return None
    return build(checked_install(project, requirement), "sdist", dist_dir)


def image_wheel(project: Path) -> Path | None:
    """Put the runtime's wheel in the project's ``wheels/`` for the image, replacing any older
    one; none (and any older one removed) when the project does not pin the runtime or the
    runtime is a released one, which the image installs from the index."""
    requirement = pinned(project)
    dist = checked_install(project, requirement) if requirement is not None else None
    folder = project / WHEELS_DIR
    stale = sorted(folder.glob(f"{MODULE}-*.whl")) if folder.is_dir() else []
    if dist is None or is_released(dist):
        for wheel in stale:
            wheel.unlink()
        return None
    with tempfile.TemporaryDirectory(prefix="runtime-wheel-") as scratch:
        built = build(dist, "wheel", Path(scratch))
        for wheel in stale:
            wheel.unlink()
        folder.mkdir(exist_ok=True)
        return Path(shutil.move(built, folder / built.name))
