"""Restart-safe checkpoints: the complete-marker protocol, framework-free.

Vertex reruns a replica's code from the start after a VM restart or preemption, so a run must
find its newest *complete* checkpoint by itself. A checkpoint is the folder
``<checkpoint_dir>/checkpoint-<step>/``. Its files are copied first and a small ``COMPLETE``
marker (JSON: step and the size of every file) is written last, so a replica killed mid-copy
leaves a folder without a marker, which is skipped with a warning. The marker itself is written
under another name and renamed into place, so it is never seen half-written. Files are copied one
by one and folders are never renamed, because the ``/gcs/`` FUSE mount is not POSIX (renaming a
file there is a copy and a delete: the new name still appears whole).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from vertex_trainer_runtime import runtime

logger = logging.getLogger(__name__)

MARKER = "COMPLETE"
PARTIAL_MARKER = "COMPLETE.partial"  # the marker while it is written; renamed when whole
PREFIX = "checkpoint-"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str  # a file-system path (gs:// roots are read through the /gcs/ mount)

    @property
    def marker(self) -> str:
        return os.path.join(self.path, MARKER)

    def metadata(self) -> dict:
        with open(self.marker, encoding="utf-8") as handle:
            return json.load(handle)


def _root(root: str) -> str:
    return runtime.local_path(runtime.strip_trailing_slash(root))


def path_for(root: str, step: int) -> str:
    """The folder of the checkpoint at ``step`` under ``root``."""
    return os.path.join(_root(root), f"{PREFIX}{step}")


def list_checkpoints(root: str) -> list[Checkpoint]:
    """All ``checkpoint-<step>`` folders under ``root``, oldest first, complete or not."""
    folder = _root(root)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = _NAME.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append(Checkpoint(int(match.group(1)), os.path.join(folder, name)))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def _files(folder: str) -> dict[str, int]:
    sizes = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, folder)
            if relative not in (MARKER, PARTIAL_MARKER):
                sizes[relative.replace(os.sep, "/")] = os.path.getsize(path)
    return sizes


def problem(checkpoint: Checkpoint) -> str | None:
    """Why ``checkpoint`` cannot be restored, or None when its marker vouches for every file."""
    if not os.path.exists(checkpoint.marker):
        return "no COMPLETE marker (the run stopped while writing it)"
    try:
        metadata = checkpoint.metadata()
        expected = metadata["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"unreadable COMPLETE marker ({error})"
    for relative, size in expected.items():
        path = os.path.join(checkpoint.path, relative)
        if not os.path.isfile(path):
            return f"{relative} is missing"
        if os.path.getsize(path) != size:
            return f"{relative} has {os.path.getsize(path)} bytes, the marker says {size}"
    return None


def latest_complete(
    root: str, validate: Callable[[str], None] | None = None, max_step: int | None = None
) -> Checkpoint | None:
    """The newest checkpoint that is complete and passes ``validate(path)`` (which may raise).

    Incomplete or invalid newer checkpoints are skipped with a warning, never fatal. With
    ``max_step``, newer checkpoints are not considered (replicas that agreed on a step).
    """
    candidates = list_checkpoints(root)
    if max_step is not None:
        candidates = [checkpoint for checkpoint in candidates if checkpoint.step <= max_step]
    for checkpoint in reversed(candidates):
        reason = problem(checkpoint)
        if reason is None and validate is not None:
            try:
                validate(checkpoint.path)
            except Exception as error:  # noqa: BLE001 - any failure means "do not resume from it"
                reason = f"failed validation: {error}"
        if reason is None:
            return checkpoint
        logger.warning("Skipping checkpoint %s: %s", checkpoint.path, reason)
    return None


def mark_complete(folder: str, step: int, metadata: Mapping | None = None) -> Checkpoint:
    """Write the ``COMPLETE`` marker for a checkpoint whose files are all in ``folder``."""
    folder = _root(folder)
    record = dict(metadata or {})
    record.update(step=step, files=_files(folder), created=time.time())
    # A watcher (the kill drill, a restarted replica) must never see an empty or half-written
    # marker: a preemption between open() and write() would leave one behind.
    partial = os.path.join(folder, PARTIAL_MARKER)
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    os.replace(partial, os.path.join(folder, MARKER))
    return Checkpoint(step, folder)


def publish(source: str, root: str, step: int, metadata: Mapping | None = None) -> Checkpoint:
    """Copy the local checkpoint folder ``source`` to ``root/checkpoint-<step>``, marker last."""
    destination = path_for(root, step)
    if os.path.abspath(source) != os.path.abspath(destination):
        os.makedirs(destination, exist_ok=True)
        stale_marker = os.path.join(destination, MARKER)
        if os.path.exists(stale_marker):
            os.remove(stale_marker)
        copy_files(source, destination)
    checkpoint = mark_complete(destination, step, metadata)
    logger.info("Checkpoint %d saved to %s", step, runtime.to_gcs_uri(destination))
    return checkpoint


def restore(checkpoint: Checkpoint, destination: str) -> str:
    """Copy a checkpoint's files (not its marker) into a fresh local folder ``destination``."""
    if os.path.exists(destination):
        shutil.rmtree(destination)
    os.makedirs(destination)
    copy_files(checkpoint.path, destination, listed_files(checkpoint))
    return destination


def copy_files(source: str, destination: str, relatives: Iterable[str] | None = None) -> None:
    """Copy files one by one, in order (default: every file under ``source``).

    Also for exports: the ``/gcs/`` mount wants one writer per file and no folder renames, so
    writing locally and copying file by file is the safe way to a ``gs://`` destination.
    """
    for relative in _files(source) if relatives is None else relatives:
        target = os.path.join(destination, relative)
        os.makedirs(os.path.dirname(target) or destination, exist_ok=True)
        shutil.copyfile(os.path.join(source, relative), target)


def listed_files(checkpoint: Checkpoint) -> list[str]:
    """The files a complete checkpoint's marker lists."""
    return sorted(checkpoint.metadata()["files"])


def prune(root: str, keep: int = 2) -> None:
    """Delete all but the ``keep`` newest complete checkpoints and partial ones older than them.

    Keeping two means a checkpoint corrupted after its marker was written still leaves one to
    fall back to.
    """
    checkpoints = list_checkpoints(root)
    complete = [c for c in checkpoints if problem(c) is None]
    if len(complete) <= keep:
        kept_from = complete[0].step if complete else None
    else:
        kept_from = complete[-keep].step
    if kept_from is None:
        return
    for checkpoint in checkpoints:
        if checkpoint.step < kept_from:
            shutil.rmtree(checkpoint.path, ignore_errors=True)


class Interval:
    """Tells when ``minutes`` have passed since the last save (0 disables it)."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = minutes * 60
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        return self.seconds > 0 and self._clock() - self._last >= self.seconds

    def reset(self) -> None:
        self._last = self._clock()
