"""Imports TensorFlow without its start-up noise, so the job's logs start with our own lines.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). On Vertex every stderr line
is logged as an error, and importing TensorFlow prints INFO banners and meaningless "Unable to
register cuFFT/cuDNN/cuBLAS factory" lines: unless ``TF_CPP_MIN_LOG_LEVEL`` is set, those are
dropped, the rest passed on. On a machine without an NVIDIA device, so are the lines of
TensorFlow's CUDA probe (from 2.21 it probes at the first device query, not at import, and logs
before its log level applies). Import this module before anything imports TensorFlow.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile

DEFAULT_LOG_LEVEL = "1"  # TensorFlow's C++ log: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR
HARMLESS = (
    "Unable to register cuFFT factory",
    "Unable to register cuDNN factory",
    "Unable to register cuBLAS factory",
    "TF-TRT Warning: Could not find TensorRT",
    "All log messages before absl::InitializeLog() is called are written to STDERR",
)
# Harmless where there is no GPU to find (a CPU VM or container); on a GPU machine they say why
# TensorFlow will not use it, and are kept.
HARMLESS_WITHOUT_GPU = (
    "Could not find cuda drivers on your machine",
    "failed call to cuInit",
)


def _has_nvidia_device() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _import() -> None:
    import tensorflow
    import tf_keras  # noqa: F401

    # The CUDA probe (at import up to TensorFlow 2.20) runs here, where its lines are filtered.
    # Listing physical devices leaves the runtime uninitialized: a strategy can still be made.
    tensorflow.config.list_physical_devices("GPU")


def import_tensorflow() -> None:
    """Import TensorFlow (and tf-keras) with the harmless import-time lines filtered out."""
    if "tensorflow" in sys.modules or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        _import()
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = DEFAULT_LOG_LEVEL
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (an embedding host): nothing to filter
        _import()
        return
    # TensorFlow's C++ code writes to file descriptor 2 itself: catch that in a file (a pipe
    # could fill up and block the import), then replay the lines worth keeping.
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            _import()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            harmless = HARMLESS if _has_nvidia_device() else HARMLESS + HARMLESS_WITHOUT_GPU
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not any(text in line for text in harmless):
                    sys.stderr.write(line)
            sys.stderr.flush()


import_tensorflow()
