"""Where the user's project is, and the names every tool shares about it.

The tools run from a project's folder (the Makefile's), never from inside the package, so the
project root is the folder with ``vertex.yaml`` at or above the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_FILE = "vertex.yaml"
# Local job folders (one per `make train-local`), under the project root.
LOCAL_JOBS = Path("outputs") / "local"
LOCAL_STUDIES = Path("outputs") / "studies"  # make tune-local
# The module each replica runs, on Vertex and here.
TRAINER_MODULE = "trainer.task"
# Set by the tools' own tests to point at a project without changing directory.
PROJECT_ENV = "VERTEX_TOOLS_PROJECT"


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) that holds ``vertex.yaml``.

    Falls back to ``start`` itself, so a missing config is reported by the loader, with its path.
    """
    if start is None and os.environ.get(PROJECT_ENV):
        return Path(os.environ[PROJECT_ENV]).resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    return here
