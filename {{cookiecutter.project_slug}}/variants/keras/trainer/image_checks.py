"""Cheap checks that every listed image file is one TensorFlow can decode, before training.

Split out of ``data.py``: a bad file (truncated by an interrupted copy, a renamed text, HTML or
LFS-pointer file) would otherwise fail deep inside the input pipeline with an error that names no
file; here it is refused in one ``InputError`` line naming it.
"""

from __future__ import annotations

import concurrent.futures
import struct

import tensorflow as tf

from trainer import cli

# What a whole image file starts and ends with, by format: a truncated file (an interrupted
# copy) lacks its end, a renamed text or HTML file its start.
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"
_JPEG_START, _JPEG_END = b"\xff\xd8\xff", b"\xff\xd9"
_CHECK_THREADS = 16  # files are checked in parallel: on gs:// each costs a round trip


def image_file_problem(path: str) -> str | None:
    """Why TensorFlow could not decode this image file, from its first and last bytes, or None.

    Cheap (two small reads), so every listed file is checked before training; decoding it
    later would fail deep inside the input pipeline with an error that names no file.
    """
    with tf.io.gfile.GFile(path, "rb") as handle:
        size = handle.size()
        head = handle.read(16)
        handle.seek(max(0, size - 16))
        tail = handle.read(16)
    if size == 0:
        return "the file is empty"
    if head.startswith(_PNG_START):
        return None if tail.endswith(_PNG_END) else "a truncated PNG (no IEND chunk at its end)"
    if head.startswith(_JPEG_START):
        # A JPEG ends with the EOI marker; some writers pad a few zero bytes after it.
        whole = _JPEG_END in tail.rstrip(b"\x00")[-2:]
        return None if whole else "a truncated JPEG (no end-of-image marker)"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return None if tail.rstrip(b"\x00").endswith(b";") else "a truncated GIF"
    if head.startswith(b"BM") and len(head) >= 6:
        declared = struct.unpack("<I", head[2:6])[0]
        return None if size >= declared else f"a truncated BMP ({size} of {declared} bytes)"
    return "not a JPEG, PNG, BMP or GIF image"


def check_image_files(paths: list[str], flag: str) -> None:
    """InputError naming the first unreadable image file (in listing order), if any."""
    with concurrent.futures.ThreadPoolExecutor(_CHECK_THREADS) as pool:
        problems = list(pool.map(image_file_problem, paths))
    for path, problem in zip(paths, problems, strict=True):
        if problem:
            bad = sum(1 for other in problems if other)
            more = f" ({bad - 1} more unreadable images)" if bad > 1 else ""
            raise cli.InputError(
                f"{flag} {path}: cannot read this image: {problem}{more}; "
                "replace or remove the file"
            )
