"""The writer side of Vertex AI's runtime contract: the environment a replica of a job gets.

The local emulator (``local_run``, processes and containers) builds each replica's variables
here. The trainer reads them with its own ``vertex_trainer_runtime.runtime`` (it runs on Vertex, where this
package is not installed); the template's tests hold the two against each other and against
Vertex's documentation (shapes of ``CLUSTER_SPEC``, ``TF_CONFIG`` and ``AIP_*``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

GCS_PREFIX = "gs://"
FUSE_ROOT = "/gcs/"  # Cloud Storage FUSE: gs://bucket/a is /gcs/bucket/a in every replica
# Worker pool order of a CustomJob; TF_CONFIG names them chief, worker, ps and evaluator.
POOL_TO_TF_TASK = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
}
POOLS = tuple(POOL_TO_TF_TASK)
# Pools whose replicas train together (pool 2: parameter servers or Reduction Server, pool 3:
# evaluators, are not members of a data-parallel group).
TRAINING_POOLS = ("workerpool0", "workerpool1")
MODEL_SUBDIR, CHECKPOINT_SUBDIR, TENSORBOARD_SUBDIR = "model", "checkpoints", "logs"
# Every variable Vertex (or a launcher before it) may set on a replica: a launcher clears them
# so that stale values of its own shell never reach a replica.
CONTRACT_VARIABLES = (
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_PROJECT_ID",
    "CLOUD_ML_JOB_ID",
    "CLOUD_ML_TRIAL_ID",
    "CLOUD_ML_HP_METRIC_FILE",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
)


def is_gcs_uri(path: str) -> bool:
    return path.startswith(GCS_PREFIX)


def to_fuse_path(path: str) -> str:
    """``gs://bucket/a`` -> ``/gcs/bucket/a``; other paths are returned unchanged."""
    return FUSE_ROOT + path[len(GCS_PREFIX) :] if is_gcs_uri(path) else path


def join(base: str, *parts: str) -> str:
    """Join path parts onto a local path, ``/gcs/`` path or ``gs://`` URI (no trailing /)."""
    path = base.rstrip("/") or "/"
    if path + "/" == GCS_PREFIX:
        path = GCS_PREFIX.rstrip("/")
    for part in parts:
        path = f"{path}/{part.strip('/')}" if path != "/" else f"/{part.strip('/')}"
    return path


def run_output_dir(base_output_dir: str, trial: str | None = None) -> str:
    """The output base of one job: ``<base>``, or ``<base>/<trial>`` for an HPT trial's job."""
    return join(base_output_dir, trial) if trial else join(base_output_dir)


def training_hosts(pools: Mapping[str, list[str]]) -> list[str]:
    """Addresses of the replicas that train together, chief first (pools 0 and 1)."""
    return [host for pool in TRAINING_POOLS for host in pools.get(pool, [])]


def node_rank(pools: Mapping[str, list[str]], pool: str, index: int) -> int:
    """Rank among the training replicas: workerpool0 is 0, workerpool1[i] is i + 1."""
    return index if pool == POOLS[0] else len(pools.get(POOLS[0], [])) + index


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


def replica_environment(
    pools: Mapping[str, list[str]],
    pool: str,
    index: int,
    *,
    base_output_dir: str,
    job_id: str,
    project_number: str,
    trial: str | None = None,
    job_args: tuple[str, ...] | list[str] = (),
) -> dict[str, str]:
    """The variables Vertex sets on replica ``pool``/``index`` of a job, as strings.

    ``pools`` maps ``workerpool0``.. to ``host:port`` lists (only pools with replicas).
    Output dirs get a ``<trial>/`` level for an HPT trial and end with "/" like Vertex's.
    ``TF_CONFIG`` is set on multi-replica jobs only; ``MASTER_ADDR``/``MASTER_PORT``/
    ``WORLD_SIZE``/``RANK`` (node count and node rank, as observed on multi-node jobs) only when
    more than one replica trains (Vertex docs: distributed training, code requirements).
    """
    if pool not in POOLS or not 0 <= index < len(pools.get(pool, [])):
        raise ValueError(f"{pool}-{index} is not a replica of the job")
    trial = str(trial) if trial not in (None, "") else None
    run_dir = run_output_dir(base_output_dir, trial)
    # The shape real jobs show in CLUSTER_SPEC's "job": a JSON-encoded string.
    job = {"python_module": "", "package_uris": [], "job_args": list(job_args)}
    task: dict = {"type": pool, "index": index}
    if trial:
        task["trial"] = trial
    cluster = {name: list(hosts) for name, hosts in pools.items() if hosts}
    env = {
        "AIP_MODEL_DIR": join(run_dir, MODEL_SUBDIR) + "/",
        "AIP_CHECKPOINT_DIR": join(run_dir, CHECKPOINT_SUBDIR) + "/",
        "AIP_TENSORBOARD_LOG_DIR": join(run_dir, TENSORBOARD_SUBDIR) + "/",
        "CLOUD_ML_PROJECT_ID": project_number,
        "CLOUD_ML_JOB_ID": job_id,
        "CLUSTER_SPEC": _json(
            {"cluster": cluster, "environment": "cloud", "task": task, "job": _json(job)}
        ),
    }
    if sum(len(hosts) for hosts in cluster.values()) > 1:
        # Every replica of a multi-replica job, whatever the framework; evaluators appear only
        # as a task type, never as a cluster key.
        tf_cluster = {
            POOL_TO_TF_TASK[name]: hosts for name, hosts in cluster.items() if name != POOLS[3]
        }
        tf_task = {"type": POOL_TO_TF_TASK[pool], "index": index}
        if trial:
            tf_task["trial"] = trial
        tf_task["cloud"] = f"local-{job_id}"  # an internal id on Vertex; code must ignore it
        env["TF_CONFIG"] = _json(
            {"cluster": tf_cluster, "environment": "cloud", "job": job, "task": tf_task}
        )
        hosts = training_hosts(cluster)
        if pool in TRAINING_POOLS and len(hosts) > 1:
            master_host, _, master_port = hosts[0].rpartition(":")
            env.update(
                MASTER_ADDR=master_host,
                MASTER_PORT=master_port,
                WORLD_SIZE=str(len(hosts)),
                RANK=str(node_rank(cluster, pool, index)),
            )
    return env


# The trainer's checkpoint protocol (vertex_trainer_runtime.checkpoints), as a watcher outside it sees it:
# a checkpoint is a ``checkpoint-<step>`` folder, complete once its ``COMPLETE`` marker exists.
CHECKPOINT_MARKER = "COMPLETE"
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")


def marked_complete(root: str) -> list[str]:
    """Paths of the complete checkpoints under ``root`` at any depth (per job or per task)."""
    found = []
    for directory, subfolders, _ in os.walk(to_fuse_path(root)):
        for name in list(subfolders):
            if CHECKPOINT_NAME.match(name):
                subfolders.remove(name)  # a checkpoint's own files are not walked
                path = os.path.join(directory, name)
                if os.path.exists(os.path.join(path, CHECKPOINT_MARKER)):
                    found.append(path)
    return sorted(found)


# The job's Experiment run, named to the trainer (vertex_trainer_runtime.tracking reads them): what the SDK
# reads (aiplatform/metadata/constants.py) and its preview CustomJob.submit sets.
EXPERIMENT_ENV, EXPERIMENT_RUN_ENV = "AIP_EXPERIMENT_NAME", "AIP_EXPERIMENT_RUN_NAME"


def experiment_env(project: str, region: str, experiment: str, run: str) -> dict[str, str]:
    """Full resource names (they carry project and region) of an experiment and its run."""
    contexts = f"projects/{project}/locations/{region}/metadataStores/default/contexts"
    return {
        EXPERIMENT_ENV: f"{contexts}/{experiment}",
        EXPERIMENT_RUN_ENV: f"{contexts}/{experiment}-{run}",
    }
