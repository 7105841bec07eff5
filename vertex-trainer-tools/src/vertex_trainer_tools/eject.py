"""``vertex-tools eject-runtime``: copy vertex-trainer-runtime's modules into the project, to
change them there (as torchtune's ``tune cp`` copies a recipe).

The installed package's modules become the project's ``vertex_trainer_runtime/`` package, beside
``trainer/``, so every import stays the same. The project then carries it everywhere the
trainer goes: ``setup.py`` packages it (the sdist of package mode), each Dockerfile copies it,
and ``requirements.txt`` no longer pins the runtime, so neither the image, the sdist nor ``make
install`` fetches it again. From the project folder the copy comes first on ``sys.path``
(``python -m``, pytest), ahead of the installed package that the tools keep using.

Everything is checked before the first write; a refusal is one line and changes nothing, and a
failure while writing puts back what was already written.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from vertex_trainer_tools import runtime_package
from vertex_trainer_tools.errors import FAILED, ToolError
from vertex_trainer_tools.project import project_root

MODULE = runtime_package.MODULE
SETUP = "setup.py"
# What the template's setup.py packages, and the same with the ejected runtime.
TRAINER_ONLY = 'include=["trainer", "trainer.*"]'
WITH_RUNTIME = f'include=["trainer", "trainer.*", "{MODULE}", "{MODULE}.*"]'
TRAINER_COPY = "COPY trainer/ trainer/"
RUNTIME_COPY = f"COPY {MODULE}/ {MODULE}/"


def planned_setup(project: Path) -> str | None:
    """setup.py with the runtime among its packages; None when it already names it."""
    path = project / SETUP
    if not path.is_file():
        raise ToolError(f"{SETUP}: not found in {project}")
    text = path.read_text()
    if MODULE in text:
        return None
    if TRAINER_ONLY not in text:
        raise ToolError(
            f'{SETUP}: no find_packages({TRAINER_ONLY}) to add "{MODULE}", "{MODULE}.*" to: '
            "add them to its packages yourself, then rerun"
        )
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        if line.strip() == f"packages=find_packages({TRAINER_ONLY}),":  # the template's line
            indent = line[: len(line) - len(line.lstrip())]
            lines[number] = (
                f"{indent}packages=find_packages(\n{indent}    {WITH_RUNTIME}\n{indent}),\n"
            )
            return "".join(lines)
    return text.replace(TRAINER_ONLY, WITH_RUNTIME, 1)


def planned_dockerfiles(project: Path) -> dict[Path, str]:
    """Each Dockerfile with a ``COPY`` of the runtime after its ``COPY trainer/ trainer/``."""
    planned = {}
    for path in sorted(project.glob("Dockerfile*")):
        lines = path.read_text().splitlines(keepends=True)
        if any(line.strip() == RUNTIME_COPY for line in lines):
            continue
        at = [i for i, line in enumerate(lines) if line.strip() == TRAINER_COPY]
        if not at:
            raise ToolError(
                f"{path.name}: no `{TRAINER_COPY}` line to add `{RUNTIME_COPY}` after: "
                "add it yourself, then rerun"
            )
        lines.insert(at[0] + 1, RUNTIME_COPY + "\n")
        planned[path] = "".join(lines)
    return planned


def planned_requirements(project: Path) -> str | None:
    """requirements.txt without its lines that pin the runtime; None when it has none."""
    found = {number for number, _ in runtime_package.runtime_lines(project)}
    if not found:
        return None
    path = project / runtime_package.REQUIREMENTS
    lines = path.read_text().splitlines(keepends=True)
    return "".join(line for number, line in enumerate(lines) if number not in found)


def command(args: argparse.Namespace) -> int:
    project = project_root()
    target = project / MODULE
    requirement = runtime_package.pinned(project)
    if target.exists():
        if requirement is None:
            raise ToolError(f"{MODULE}/: the runtime is already ejected into {project}")
        raise ToolError(f"{MODULE}/: already in {project}; move it away, then rerun")
    if requirement is not None:
        dist = runtime_package.checked_install(project, requirement)
    else:
        dist = runtime_package.installed()
    source = runtime_package.module_folder()
    writes: dict[Path, str] = planned_dockerfiles(project)
    for path, text in (
        (project / SETUP, planned_setup(project)),
        (project / runtime_package.REQUIREMENTS, planned_requirements(project)),
    ):
        if text is not None:
            writes[path] = text

    originals = {path: path.read_text() for path in writes}
    with tempfile.TemporaryDirectory(prefix=f".{MODULE}-", dir=project) as scratch:
        staged = Path(scratch) / MODULE
        try:
            shutil.copytree(source, staged, ignore=runtime_package.SKIPPED)
            for path, text in writes.items():
                path.write_text(text)
            staged.rename(target)
        except OSError as error:
            for path, text in originals.items():
                path.write_text(text)
            raise ToolError(f"ejecting the runtime failed: {error}", exit_code=FAILED) from None

    print(f"Ejected {runtime_package.DISTRIBUTION} {dist.version} into {MODULE}/ (from {source})")
    for path in writes:
        print(f"  updated {path.relative_to(project)}")
    print(
        f"The trainer now imports {MODULE}/ of this project: change it there. "
        "Run `make install` to reinstall the project with it."
    )
    return 0
