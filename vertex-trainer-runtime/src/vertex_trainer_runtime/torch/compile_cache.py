"""torch.compile's caches beside the checkpoints: a restart reuses the compiled graphs.

A restart on Vertex is a fresh VM: inductor's on-disk cache is gone, and ``--torch-compile``
would compile every graph again (a minute or more of the ledger's compile time per attempt).
The rank that saves checkpoints writes ``torch.compiler.save_cache_artifacts()`` once, at its
first checkpoint (after the first compiled steps and evaluation), as :data:`FILE` in the
checkpoint dir: under another name, then renamed into place, so that it is never read
half-written. Each attempt hot-loads it before its first compiled call; a damaged file, or one
of another torch version, logs one line and the graphs compile afresh.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile

import torch
from transformers import TrainerCallback

from vertex_trainer_runtime import runtime

logger = logging.getLogger(__name__)

FILE = "torch-compile-cache.bin"
MAGIC = b"vertex-trainer torch.compile cache 1\n"


def path_in(checkpoint_dir: str) -> str:
    return os.path.join(runtime.local_path(checkpoint_dir), FILE)


def encode(payload: bytes, version: str | None = None) -> bytes:
    """``payload`` after a header: the format, the torch version, the payload's SHA-256."""
    version = version or torch.__version__
    digest = hashlib.sha256(payload).hexdigest()
    return MAGIC + f"{version}\n{digest}\n".encode("ascii") + payload


def decode(data: bytes, version: str | None = None) -> bytes:
    """The payload of :func:`encode`'s ``data``; ValueError saying why it cannot be used."""
    version = version or torch.__version__
    if not data.startswith(MAGIC):
        raise ValueError("not a cache this trainer wrote")
    lines = data[len(MAGIC) :].split(b"\n", 2)
    if len(lines) != 3:
        raise ValueError("truncated")
    written_by, digest, payload = lines[0].decode("ascii", "replace"), lines[1], lines[2]
    if written_by != version:
        raise ValueError(f"written by torch {written_by}, this is torch {version}")
    if hashlib.sha256(payload).hexdigest().encode("ascii") != digest:
        raise ValueError("damaged (checksum)")
    return payload


def load(checkpoint_dir: str) -> bool:
    """Hot-load the cache of an earlier attempt, if there is one; True if it loaded."""
    path = path_in(checkpoint_dir)
    try:
        with open(path, "rb") as handle:
            payload = decode(handle.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as error:
        logger.warning("Not using torch.compile's cache %s (%s): compiling afresh", path, error)
        return False
    # torch logs a traceback when the artifacts do not unpickle: one line of ours instead.
    torch_log = logging.getLogger("torch.compiler._cache")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    try:
        info = torch.compiler.load_cache_artifacts(payload)
    except Exception as error:  # noqa: BLE001 - whatever fails, compiling afresh is correct
        info, why = None, f"{type(error).__name__}: {error}"
    else:
        why = "its artifacts do not load"
    finally:
        torch_log.setLevel(level)
    if info is None:
        logger.warning("Not using torch.compile's cache %s (%s): compiling afresh", path, why)
        return False
    logger.info("Loaded torch.compile's cache from %s (%s)", path, _counted(info))
    return True


def save(checkpoint_dir: str) -> bool:
    """Write what this process compiled so far as :data:`FILE`; True if written. A failure
    logs one line: the training goes on, a restart compiles afresh."""
    path = path_in(checkpoint_dir)
    try:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            logger.info("torch.compile cached nothing to save for a restart")
            return False
        payload, info = saved
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=f".{FILE}.", suffix=".partial", dir=folder)
        try:
            with os.fdopen(handle, "wb") as output:
                output.write(encode(payload))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    except Exception as error:  # noqa: BLE001 - the training must not stop for a cache
        logger.warning("Cannot save torch.compile's cache to %s: %s", path, error)
        return False
    logger.info("Saved torch.compile's cache for restarts to %s (%s)", path, _counted(info))
    return True


def _counted(info) -> str:
    kinds = getattr(info, "artifacts", {}) or {}
    return ", ".join(f"{len(keys)} {kind}" for kind, keys in kinds.items()) or "no artifacts"


class CompileCache(TrainerCallback):
    """Loads the cache when training begins (before the first compiled step), and on the first
    checkpoint of an attempt that loaded none, rank 0 saves it."""

    def __init__(self, checkpoint_dir: str):
        self.checkpoint_dir = checkpoint_dir
        self.loaded = False
        self.saved = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.loaded = load(self.checkpoint_dir)
        return control

    def on_save(self, args, state, control, **kwargs):
        if not (self.loaded or self.saved) and state.is_world_process_zero:
            save(self.checkpoint_dir)
        self.saved = True  # once: a failed write is not retried at every checkpoint
        return control
