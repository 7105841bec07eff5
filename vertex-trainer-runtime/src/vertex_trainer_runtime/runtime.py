"""The reader side of Vertex AI's runtime contract, in one framework-free place.

Everything the trainer knows about the environment Vertex AI gives a training replica lives
here: the ``AIP_*`` output directories, ``CLUSTER_SPEC`` and ``TF_CONFIG``, and the
``gs://`` <-> ``/gcs/`` (Cloud Storage FUSE) path mapping. Framework code asks this module and
never reads those variables itself. The writer side (what Vertex, and the tools' local emulator,
set on each replica) is :mod:`vertex_trainer_runtime.vertex_env`, built on the names and the
:class:`Cluster` of this module.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

GCS_PREFIX = "gs://"
FUSE_ROOT = "/gcs/"
LOCAL_OUTPUT_ROOT = "outputs"

# Worker pool order of a CustomJob: primary, workers, parameter servers / Reduction Server,
# evaluators. TF_CONFIG names them chief, worker, ps and evaluator.
POOL_TO_TF_TASK = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
}
TF_TASK_TO_POOL = {task: pool for pool, task in POOL_TO_TF_TASK.items()}
TF_TASK_TO_POOL["master"] = "workerpool0"  # legacy TF_CONFIG name of the chief
POOLS = tuple(POOL_TO_TF_TASK)
# Pools whose replicas train together (pool 2: parameter servers or a Reduction Server, pool 3:
# evaluators, are not members of a data-parallel group).
TRAINING_POOLS = ("workerpool0", "workerpool1")
# Where a job puts Google's Reduction Server (vertex.yaml's job.reduction_server). Vertex lists
# pool 2 in TF_CONFIG as "ps", whatever runs there.
REDUCTION_SERVER_POOL = "workerpool2"
# Subfolders of the base output directory (and of its <trial>/ level), as AIP_* name them.
MODEL_SUBDIR, CHECKPOINT_SUBDIR, TENSORBOARD_SUBDIR = "model", "checkpoints", "logs"


# --- paths -----------------------------------------------------------------------------------


def is_gcs_uri(path: str) -> bool:
    return path.startswith(GCS_PREFIX)


def to_fuse_path(path: str) -> str:
    """``gs://bucket/a`` -> ``/gcs/bucket/a``; other paths are returned unchanged."""
    if is_gcs_uri(path):
        return FUSE_ROOT + path[len(GCS_PREFIX) :]
    return path


def to_gcs_uri(path: str) -> str:
    """``/gcs/bucket/a`` -> ``gs://bucket/a``; other paths are returned unchanged."""
    if path.startswith(FUSE_ROOT):
        return GCS_PREFIX + path[len(FUSE_ROOT) :]
    return path


def strip_trailing_slash(path: str) -> str:
    """Drop trailing slashes (Vertex's ``AIP_*`` values end with one) but keep roots intact."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/"
    if stripped + "/" == GCS_PREFIX:  # "gs://" itself
        return path
    return stripped


def join(base: str, *parts: str) -> str:
    """Join path parts onto a local path, ``/gcs/`` path or ``gs://`` URI."""
    path = strip_trailing_slash(base)
    for part in parts:
        path = f"{path}/{part.strip('/')}" if path != "/" else f"/{part.strip('/')}"
    return path


def local_path(path: str) -> str:
    """A path that plain file I/O can use: ``gs://`` URIs go through the ``/gcs/`` FUSE mount.

    Vertex mounts every accessible bucket at ``/gcs/``. Elsewhere, mount the bucket with
    gcsfuse at ``/gcs/<bucket>`` or use a local path.
    """
    if not is_gcs_uri(path):
        return path
    fuse = to_fuse_path(path)
    bucket_root = FUSE_ROOT + path[len(GCS_PREFIX) :].split("/", 1)[0]
    if not os.path.isdir(bucket_root):
        raise RuntimeError(
            f"{path}: file access to gs:// needs the Cloud Storage FUSE mount {bucket_root} "
            "(present on Vertex AI); locally use a local path or mount the bucket with gcsfuse"
        )
    return fuse


# --- output directories ----------------------------------------------------------------------


@dataclass(frozen=True)
class OutputDirs:
    """Where this replica writes its model, checkpoints and TensorBoard logs (no trailing /)."""

    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str


def resolve_output_dirs(
    model_dir: str | None = None,
    checkpoint_dir: str | None = None,
    tensorboard_dir: str | None = None,
    job_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    local_root: str = LOCAL_OUTPUT_ROOT,
) -> OutputDirs:
    """Flag > ``AIP_*`` variable > ``--job-dir`` subfolder > ``./outputs`` subfolder.

    Vertex sets ``AIP_MODEL_DIR`` etc. whenever the job has a base output directory, with a
    ``<trial>/`` level for hyperparameter-tuning trials, so trials never overwrite each other.
    """
    env = os.environ if environ is None else environ
    base = job_dir or local_root

    def pick(flag: str | None, variable: str, subfolder: str) -> str:
        for candidate in (flag, env.get(variable)):
            if candidate:
                return strip_trailing_slash(candidate)
        return join(base, subfolder)

    return OutputDirs(
        model_dir=pick(model_dir, "AIP_MODEL_DIR", MODEL_SUBDIR),
        checkpoint_dir=pick(checkpoint_dir, "AIP_CHECKPOINT_DIR", CHECKPOINT_SUBDIR),
        tensorboard_dir=pick(tensorboard_dir, "AIP_TENSORBOARD_LOG_DIR", TENSORBOARD_SUBDIR),
    )


# --- the cluster -----------------------------------------------------------------------------


class ClusterSpecError(ValueError):
    """CLUSTER_SPEC or TF_CONFIG is present but not in a shape Vertex produces."""


@dataclass(frozen=True)
class Cluster:
    """This replica's place in the job, from ``CLUSTER_SPEC`` (and ``TF_CONFIG`` if only that).

    ``pools`` maps worker-pool names (``workerpool0`` ...) to ``host:port`` lists. A job with no
    cluster variables is a single local replica: ``workerpool0`` index 0.
    """

    pool: str = "workerpool0"
    index: int = 0
    pools: dict[str, list[str]] = field(default_factory=dict)
    trial: str | None = None
    tf_config: dict | None = None

    @property
    def task_type(self) -> str:
        """TF's name for this task: chief, worker, ps or evaluator."""
        return POOL_TO_TF_TASK.get(self.pool, self.pool)

    @property
    def is_chief(self) -> bool:
        """The primary replica: the job succeeds when it exits 0; it alone exports the model."""
        return self.pool == "workerpool0" and self.index == 0

    @property
    def training_hosts(self) -> list[str]:
        """Addresses of the replicas that train together: pools 0 and 1, chief first.

        Pool 2 (parameter servers or the Reduction Server) and pool 3 (evaluators) are not
        members of a data-parallel group.
        """
        return [host for pool in TRAINING_POOLS for host in self.pools.get(pool, [])]

    @property
    def reducers(self) -> list[str]:
        """Pool 2: Google's Reduction Server, as neither MultiWorkerMirroredStrategy nor DDP has
        parameter servers. It runs Google's image and serves NCCL through Google's plugin."""
        return list(self.pools.get(REDUCTION_SERVER_POOL, []))

    @property
    def num_nodes(self) -> int:
        return max(1, len(self.training_hosts))

    @property
    def node_rank(self) -> int:
        """Rank among the training replicas: workerpool0 is 0, workerpool1[i] is i + 1."""
        if self.pool == "workerpool0":
            return self.index
        if self.pool == "workerpool1":
            return len(self.pools.get("workerpool0", [])) + self.index
        raise ClusterSpecError(f"{self.pool} replicas are not training nodes")

    @property
    def is_distributed(self) -> bool:
        return self.num_nodes > 1

    @property
    def chief_address(self) -> tuple[str, int] | None:
        """(host, port) of workerpool0's first replica, the rendezvous point of the job."""
        chief = self.pools.get("workerpool0")
        if not chief:
            return None
        host, _, port = chief[0].rpartition(":")
        return host, int(port)


def _parse_json_variable(name: str, raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ClusterSpecError(f"{name} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ClusterSpecError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _trial(task: Mapping) -> str | None:
    trial = task.get("trial")
    return str(trial) if trial not in (None, "") else None


def _from_cluster_spec(raw: str) -> Cluster:
    spec = _parse_json_variable("CLUSTER_SPEC", raw)
    pools = spec.get("cluster") or {}
    task = spec.get("task") or {}
    if not isinstance(pools, dict) or not isinstance(task, dict):
        raise ClusterSpecError("CLUSTER_SPEC must hold a 'cluster' object and a 'task' object")
    pool = task.get("type", "workerpool0")
    if pool not in POOL_TO_TF_TASK:
        raise ClusterSpecError(f"CLUSTER_SPEC task.type {pool!r} is not workerpool0..3")
    # 'job' (a dict, or a JSON string in real jobs) and any extra keys are ignored on purpose.
    return Cluster(
        pool=pool,
        index=int(task.get("index", 0)),
        pools={name: list(hosts) for name, hosts in pools.items()},
        trial=_trial(task),
    )


def _from_tf_config(raw: str) -> Cluster:
    config = _parse_json_variable("TF_CONFIG", raw)
    tasks = config.get("cluster") or {}
    task = config.get("task") or {}
    task_type = task.get("type", "chief")
    if task_type not in TF_TASK_TO_POOL:
        raise ClusterSpecError(
            f"TF_CONFIG task.type {task_type!r} is not chief/worker/ps/evaluator"
        )
    pools = {TF_TASK_TO_POOL[name]: list(hosts) for name, hosts in tasks.items()}
    return Cluster(
        pool=TF_TASK_TO_POOL[task_type],
        index=int(task.get("index", 0)),
        pools=pools,
        trial=_trial(task),
        tf_config=config,
    )


def cluster_from_env(environ: Mapping[str, str] | None = None) -> Cluster:
    """Read this replica's role; ``CLUSTER_SPEC`` wins, ``TF_CONFIG`` is kept for TF code.

    Vertex sets ``CLUSTER_SPEC`` on every replica and ``TF_CONFIG`` only on multi-replica jobs.
    """
    env = os.environ if environ is None else environ
    tf_config = env.get("TF_CONFIG")
    if env.get("CLUSTER_SPEC"):
        cluster = _from_cluster_spec(env["CLUSTER_SPEC"])
        if tf_config:
            config = _parse_json_variable("TF_CONFIG", tf_config)
            trial = cluster.trial or _trial(config.get("task") or {})
            cluster = Cluster(cluster.pool, cluster.index, cluster.pools, trial, config)
        return cluster
    if tf_config:
        return _from_tf_config(tf_config)
    return Cluster()


def training_tf_config(config: Mapping) -> dict:
    """``TF_CONFIG`` for MultiWorkerMirroredStrategy: Vertex's, less the reducers' ``ps`` entry
    (pool 2 is ``ps`` to Vertex). TensorFlow would wait forever on ``ps`` 0 as its coordination
    leader; reducers are no TensorFlow servers (NCCL reaches them through Google's plugin)."""
    cluster = dict(config.get("cluster") or {})
    cluster.pop(POOL_TO_TF_TASK[REDUCTION_SERVER_POOL], None)
    return {**config, "cluster": cluster}
