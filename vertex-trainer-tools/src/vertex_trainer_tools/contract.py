"""The Vertex AI runtime contract as the tools use it: the runtime package's, in one place.

The writer side (the environment of a replica: ``replica_environment``) and the reader side
(what the trainer makes of it) both live in ``vertex_trainer_runtime`` (``vertex_env`` and
``runtime``), which the trainer runs on Vertex; the local emulator (``local_run``, processes and
containers) and the tools import them through this module. Only what a watcher outside the
trainer needs is defined here: the complete checkpoints under a folder, whatever the framework.
"""

from __future__ import annotations

import os
import re

from vertex_trainer_runtime.checkpoints import MARKER as CHECKPOINT_MARKER
from vertex_trainer_runtime.checkpoints import PREFIX as CHECKPOINT_PREFIX
from vertex_trainer_runtime.runtime import (
    CHECKPOINT_SUBDIR,
    FUSE_ROOT,
    GCS_PREFIX,
    MODEL_SUBDIR,
    POOL_TO_TF_TASK,
    POOLS,
    TENSORBOARD_SUBDIR,
    TRAINING_POOLS,
    is_gcs_uri,
    join,
    to_fuse_path,
)
from vertex_trainer_runtime.tracking import EXPERIMENT_ENV
from vertex_trainer_runtime.tracking import RUN_ENV as EXPERIMENT_RUN_ENV
from vertex_trainer_runtime.vertex_env import (
    CONTRACT_VARIABLES,
    experiment_env,
    replica_environment,
    run_output_dir,
)

__all__ = [
    "CHECKPOINT_MARKER",
    "CHECKPOINT_NAME",
    "CHECKPOINT_SUBDIR",
    "CONTRACT_VARIABLES",
    "EXPERIMENT_ENV",
    "EXPERIMENT_RUN_ENV",
    "FUSE_ROOT",
    "GCS_PREFIX",
    "MODEL_SUBDIR",
    "POOLS",
    "POOL_TO_TF_TASK",
    "TENSORBOARD_SUBDIR",
    "TRAINING_POOLS",
    "experiment_env",
    "is_gcs_uri",
    "join",
    "marked_complete",
    "replica_environment",
    "set_by_vertex",
    "run_output_dir",
    "to_fuse_path",
]

# Where Vertex (or torchrun, on Vertex's PyTorch images) takes each variable of its contract from,
# and where a user changes it: a value in job.env would be overwritten on Vertex, or would lie to
# the trainer locally.
_OUTPUT = "base_output_dir (<base_output_dir>/<job>/{}/): change base_output_dir"
_SOURCES = {
    "AIP_MODEL_DIR": _OUTPUT.format("model"),
    "AIP_CHECKPOINT_DIR": _OUTPUT.format("checkpoints"),
    "AIP_TENSORBOARD_LOG_DIR": _OUTPUT.format("logs"),
    "CLOUD_ML_PROJECT_ID": "the project that runs the job: change project",
}
# The rest of CONTRACT_VARIABLES but CLOUD_ML_*: CLUSTER_SPEC, TF_CONFIG, MASTER_ADDR, RANK, ...
_FROM_POOLS = "the worker pools: change job.worker_pools (or job.reduction_server)"
# AIP_ variables a user may still set: the Experiment run of a job without job.experiment.
_USER_AIP = (EXPERIMENT_ENV, EXPERIMENT_RUN_ENV)


def set_by_vertex(name: str) -> str:
    """Where Vertex takes the variable ``name`` from on every replica, and what to change
    instead ('' when Vertex leaves it to the user): ``job.env`` must not set it."""
    if name in _SOURCES:
        return _SOURCES[name]
    if name.startswith("CLOUD_ML_"):
        return "the job it runs"
    if name in CONTRACT_VARIABLES:
        return _FROM_POOLS
    if name.startswith("AIP_") and name not in _USER_AIP:
        return "the job it runs"
    return ""


# The trainer's checkpoint protocol (vertex_trainer_runtime.checkpoints) as a watcher outside it
# sees it: a checkpoint is a ``checkpoint-<step>`` folder, complete once its marker exists.
CHECKPOINT_NAME = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d+)$")


def marked_complete(root: str) -> list[str]:
    """Paths of the complete checkpoints under ``root`` at any depth (per job or per task), for
    the kill drill: it need not know whether a framework saves per job or per task."""
    found = []
    for directory, subfolders, _ in os.walk(to_fuse_path(root)):
        for name in list(subfolders):
            if CHECKPOINT_NAME.match(name):
                subfolders.remove(name)  # a checkpoint's own files are not walked
                path = os.path.join(directory, name)
                if os.path.exists(os.path.join(path, CHECKPOINT_MARKER)):
                    found.append(path)
    return sorted(found)
