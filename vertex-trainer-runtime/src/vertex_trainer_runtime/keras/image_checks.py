"""Cheap checks that every listed image file is one TensorFlow can decode, before training.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). A truncated, renamed or
LFS-pointer file would fail deep in the input pipeline with an error naming no file; here it is
one line naming it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import re
import struct
from collections.abc import Iterator

import tensorflow as tf

from vertex_trainer_runtime import cli

logger = logging.getLogger(__name__)

# What a whole image file starts and ends with, by format: a truncated file (an interrupted
# copy) lacks its end, a renamed text or HTML file its start.
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"
_JPEG_START, _JPEG_END = b"\xff\xd8\xff", b"\xff\xd9"
_CHECK_THREADS = 16  # files are checked in parallel: on gs:// each costs a round trip
# A data set of at most this many images is also decoded whole before training (a few ms an
# image), so a file damaged in its middle is named too; a larger one gets the cheap check only,
# and ``name_the_unreadable_image`` names the file should training fail to decode one.
DECODE_ALL_MAX_FILES = 5000
# What TensorFlow's error says when an input pipeline failed to decode an image ("Invalid PNG",
# "jpeg::Uncompress failed", the DecodeImage node): only then are the files decoded to find it.
_DECODE_FAILURE = re.compile(r"decod|image|jpe?g|png|gif|bmp", re.IGNORECASE)


def image_file_problem(path: str) -> str | None:
    """Why TensorFlow could not decode this image file, from its first and last bytes, or None."""
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


def decode_problem(path: str) -> str | None:
    """Why TensorFlow cannot decode this whole image file, as training would, or None."""
    problem = image_file_problem(path)
    if problem:
        return problem
    try:
        tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    except tf.errors.OpError as error:  # InvalidArgumentError, DataLossError
        first = (error.message.strip().splitlines() or [type(error).__name__])[0]
        # less the op's decorations: the function node in braces, the [Op:DecodeImage] tag and
        # the op's (empty) "name: " after it
        first = re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:\w+\]( name:.*)?", "", first).strip().rstrip(".")
        return f"TensorFlow cannot decode it ({first})"
    return None


def check_image_files(paths: list[str], flag: str, decode_all: bool = False) -> None:
    """InputError naming the first unreadable image file (in listing order), if any: by its
    first and last bytes, and for a set of at most ``DECODE_ALL_MAX_FILES`` (any set with
    ``decode_all``), decoded whole."""
    whole = decode_all or len(paths) <= DECODE_ALL_MAX_FILES
    check = decode_problem if whole else image_file_problem
    with concurrent.futures.ThreadPoolExecutor(_CHECK_THREADS) as pool:
        problems = list(pool.map(check, paths))
    for path, problem in zip(paths, problems, strict=True):
        if problem:
            bad = sum(1 for other in problems if other)
            more = f" ({bad - 1} more unreadable images)" if bad > 1 else ""
            raise cli.InputError(
                f"{flag} {path}: cannot read this image: {problem}{more}; "
                "replace or remove the file"
            )


@contextlib.contextmanager
def name_the_unreadable_image(*sources) -> Iterator[None]:
    """Turn TensorFlow's failure to decode an image of these sources inside the block into the
    InputError line of ``check_image_files``, by decoding every file of the sources that have
    files (each source: ``files``, its image paths, and ``flag``, the flag that named them); any
    other error is raised as it was.
    """
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        sources = [source for source in sources if source.files]
        if not sources or not _DECODE_FAILURE.search(error.message or ""):
            raise
        logger.warning(
            "TensorFlow could not decode an image: decoding all %d image files to name it",
            sum(len(source.files) for source in sources),
        )
        for source in sources:
            check_image_files(list(source.files), source.flag, decode_all=True)
        raise
