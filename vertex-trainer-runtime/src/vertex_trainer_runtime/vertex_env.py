"""The writer side of Vertex AI's runtime contract: the environment a replica of a job gets.

Vertex sets these variables on every replica; the tools' local emulator (``vertex-tools
local-run``, processes and containers) and tests set them the same way through this module. The
reader side is :mod:`vertex_trainer_runtime.runtime`: both use its constants (pools, ``/gcs/``,
output subfolders) and its :class:`~vertex_trainer_runtime.runtime.Cluster` for node ranks, so
what is written is what the trainer reads. Shapes as Vertex documents and real jobs show them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from vertex_trainer_runtime import tracking
from vertex_trainer_runtime.runtime import (
    CHECKPOINT_SUBDIR,
    MODEL_SUBDIR,
    POOL_TO_TF_TASK,
    POOLS,
    TENSORBOARD_SUBDIR,
    TRAINING_POOLS,
    Cluster,
    join,
)

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
EVALUATOR_POOL = "workerpool3"  # a TF_CONFIG task type only, never a TF_CONFIG cluster key


def run_output_dir(base_output_dir: str, trial: str | None = None) -> str:
    """The output base of one job: ``<base>``, or ``<base>/<trial>`` for an HPT trial's job."""
    return join(base_output_dir, trial) if trial else join(base_output_dir)


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
        # Every replica of a multi-replica job, whatever the framework.
        tf_cluster = {
            POOL_TO_TF_TASK[name]: hosts
            for name, hosts in cluster.items()
            if name != EVALUATOR_POOL
        }
        tf_task = {"type": POOL_TO_TF_TASK[pool], "index": index}
        if trial:
            tf_task["trial"] = trial
        tf_task["cloud"] = f"local-{job_id}"  # an internal id on Vertex; code must ignore it
        env["TF_CONFIG"] = _json(
            {"cluster": tf_cluster, "environment": "cloud", "job": job, "task": tf_task}
        )
        replica = Cluster(pool, index, cluster)
        hosts = replica.training_hosts
        if pool in TRAINING_POOLS and len(hosts) > 1:
            master_host, _, master_port = hosts[0].rpartition(":")
            env.update(
                MASTER_ADDR=master_host,
                MASTER_PORT=master_port,
                WORLD_SIZE=str(len(hosts)),
                RANK=str(replica.node_rank),
            )
    return env


def experiment_env(project: str, region: str, experiment: str, run: str) -> dict[str, str]:
    """The job's Experiment run named to the trainer (``tracking`` reads it): full resource
    names, which carry project and region, as the SDK's preview ``CustomJob.submit`` sets them."""
    contexts = f"projects/{project}/locations/{region}/metadataStores/default/contexts"
    return {
        tracking.EXPERIMENT_ENV: f"{contexts}/{experiment}",
        tracking.RUN_ENV: f"{contexts}/{experiment}-{run}",
    }
