"""Job folders: like Vertex, every submitted job starts in a fresh base output directory.

``make train-local`` writes ``outputs/local/<display_name>-<YYYYmmdd-HHMMSS>/`` and points
``outputs/local/latest`` at it (a symlink, or a text file holding the folder's name where
symlinks are not available). A job folder is reused only when asked: ``--resume=<folder>`` or
``--resume=latest`` (resume from its checkpoints), or an explicit ``--output-dir``.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

LATEST = "latest"


def new_job_folder(root: str | os.PathLike, display_name: str, now=None) -> Path:
    """Create and return ``<root>/<display_name>-<YYYYmmdd-HHMMSS>``, never an existing one.

    Two jobs started in the same second get ``-2``, ``-3`` ... suffixes.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base = job_folder_name(display_name, now)
    for number in range(1, 1000):
        folder = root / (base if number == 1 else f"{base}-{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise OSError(f"{root}: no free job folder name for {base}")


def point_latest(root: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Make ``<root>/latest`` name ``folder`` (relative symlink; a text file if no symlinks)."""
    root, folder = Path(root), Path(folder)
    link = root / LATEST
    target = os.path.relpath(folder, root)
    temporary = root / f".{LATEST}-{os.getpid()}"
    try:
        if temporary.is_symlink() or temporary.exists():
            temporary.unlink()
        temporary.symlink_to(target, target_is_directory=True)
        os.replace(temporary, link)  # atomic: readers see the old or the new job, never none
    except (OSError, NotImplementedError):
        if link.is_symlink():
            link.unlink()
        link.write_text(target + "\n", encoding="utf-8")
    return link


def read_latest(root: str | os.PathLike) -> Path | None:
    """The job folder ``<root>/latest`` names, or None when there is none."""
    link = Path(root) / LATEST
    if link.is_symlink() or link.is_dir():
        folder = link.resolve()
    elif link.is_file():
        folder = (Path(root) / link.read_text(encoding="utf-8").strip()).resolve()
    else:
        return None
    return folder if folder.is_dir() else None


def resume_folder(value: str, root: str | os.PathLike) -> Path:
    """The job folder that ``--resume=VALUE`` means: ``latest`` or a folder that exists."""
    if value == LATEST:
        folder = read_latest(root)
        if folder is None:
            raise ValueError(
                f"--resume: no {Path(root) / LATEST} yet (run a job first, e.g. make train-local)"
            )
        return folder
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"--resume: {value} is not a job folder (e.g. RESUME=latest or "
            f"RESUME={Path(root) / 'vertex-trainer-20260101-120000'})"
        )
    return folder.resolve()


def job_folder_name(display_name: str, now=None) -> str:
    """``<display_name>-<YYYYmmdd-HHMMSS>``, the name of a new job folder."""
    return f"{display_name}-{(now or datetime.datetime.now()).strftime('%Y%m%d-%H%M%S')}"
