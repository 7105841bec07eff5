"""The ``job:`` section of vertex.yaml: worker pools, scheduling and the Reduction Server;
and the ``model:`` section, what ``vertex-tools upload-model`` registers in the Model Registry.

``config.py`` reads it with the rest of the file (``schema.py``) and re-exports these models;
``submit.py``/``render.py`` turn them into Vertex's CustomJob spec and ``local_run/`` into
local replicas.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool

from vertex_trainer_tools import contract, pool_options, schema
from vertex_trainer_tools import gcp_names as names
from vertex_trainer_tools import vertex_limits as limits
from vertex_trainer_tools.gcp_names import ACCELERATOR_RE, MACHINE_RE, NETWORK, NETWORK_RE
from vertex_trainer_tools.schema import Int, Model, example, pattern

ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
TENSORBOARD_RE = r"^projects/[^/]+/locations/[^/]+/tensorboards/[^/]+$"
TENSORBOARD = "a TensorBoard name: projects/P/locations/REGION/tensorboards/ID"
TENSORBOARD_EG = "projects/my-project-123/locations/us-central1/tensorboards/123"
# At most 100 characters: a job's run is the context <experiment>-<job name>, 128 at most.
EXPERIMENT_RE = r"^[a-z0-9][a-z0-9-]{0,99}$"
EXPERIMENT = "an experiment name: lowercase letters, digits and '-' (1-100)"
SERVICE_ACCOUNT = "trainer@PROJECT.iam.gserviceaccount.com"
NO_ACCELERATOR = "ACCELERATOR_TYPE_UNSPECIFIED"
STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")  # aiplatform_v1 Scheduling.Strategy names
DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
# Google's Reduction Server image (also europe-docker.pkg.dev/..., asia-docker.pkg.dev/...).
REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
REDUCTION_SERVER_REPOSITORY = "/vertex-ai-restricted/training/reductionserver"

MACHINE = "a machine type"
# ReservationAffinity of aiplatform_v1 (MachineSpec.reservation_affinity), from job.reservation.
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def _accelerator(text: str) -> str:
    return NO_ACCELERATOR if text.upper() in ("NONE", "") else text.upper()


class WorkerPool(Model):
    """One entry of ``job.worker_pools``; pool 0 is the chief. An empty pool keeps a position."""

    machine_type: str = pattern(MACHINE_RE, MACHINE, "n1-standard-8")
    accelerator_type: schema.cased(_accelerator) = example("NVIDIA_TESLA_T4", NO_ACCELERATOR)
    accelerator_count: Int = example(1, 0, ge=0, le=schema.INT32_MAX)
    replica_count: Int = example(1, 1, ge=1)
    boot_disk_type: Literal[DISK_TYPES] = "pd-ssd"
    boot_disk_size_gb: Int = example(100, 100, ge=10, le=schema.INT32_MAX)
    image_uri: str = ""  # another image for this pool only (e.g. Reduction Server)
    gpu_partition_size: str = example("1g.10gb", "")  # MIG instances of this size (pool_options)
    nfs_mounts: tuple[pool_options.NfsMount, ...] = ()  # at /mnt/nfs/<mount_point>
    lustre_mounts: tuple[pool_options.LustreMount, ...] = ()  # at /mnt/lustre/<mount_point>

    @property
    def empty(self) -> bool:
        return self.replica_count == 0

    def problems(self):
        if self.empty:  # {}: a skipped pool, nothing of it reaches Vertex
            return
        if self.replica_count > limits.MAX_REPLICAS:
            yield "replica_count", limits.replica_problem(self.replica_count)
        unoffered = pool_options.unoffered_tpu(self.machine_type, self.accelerator_type)
        if unoffered:
            yield "machine_type", unoffered
            return
        found = pool_options.partition_problem(
            self.gpu_partition_size, self.accelerator_type, self.accelerator_count
        )
        if found:
            yield found
        count_why = names.count_problem(self.accelerator_type, self.accelerator_count)
        if count_why:
            yield "accelerator_count", count_why
        # preflight.py checks the name against Vertex's list (`vertex-tools check`, submit).
        if not ACCELERATOR_RE.match(self.accelerator_type):
            why = f"unknown accelerator {self.accelerator_type!r} (e.g. NVIDIA_TESLA_T4)"
            yield "accelerator_type", why
        elif not count_why or limits.machine_type_problem(self.machine_type):
            yield from limits.machine_problems(
                self.machine_type, self.accelerator_type, self.accelerator_count
            )
        if self.image_uri:
            why = limits.image_reference_problem(self.image_uri, need_host=True)
            if why:
                yield "image_uri", why


def _empty_pool() -> WorkerPool:
    return WorkerPool.model_construct(machine_type="", replica_count=0)


def _pools(value: Any) -> Any:
    """``{}`` or an empty item in ``worker_pools`` keeps a pool's position, empty."""
    if not isinstance(value, list):
        return value
    return [_empty_pool() if item in (None, {}) else item for item in value]


def _mapping(value: Any, what: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of {what}")
    return value


def _text(value: Any) -> str:
    """One label or environment value, as the user wrote it (``vertex_limits.as_text``)."""
    return limits.as_text(value)


Text = Annotated[str, BeforeValidator(_text)]


def _labels(value: Any) -> Any:
    return _mapping(value, "key: value (e.g. {team: nlp, cost-center: cc-42})")


def _env(value: Any) -> Any:
    _mapping(value, "NAME: value (e.g. {LOG_LEVEL: debug})")
    for name in value:
        if not re.match(ENV_NAME_RE, str(name)):
            raise ValueError(
                f"{name!r} is not an environment variable name: expected a mapping of NAME: "
                "value, NAME of letters, digits and '_' (e.g. {LOG_LEVEL: debug})"
            )
    return value


Labels = Annotated[dict[str, Text], BeforeValidator(_labels)]
Env = Annotated[dict[str, Text], BeforeValidator(_env)]


class Scheduling(Model):
    timeout_seconds: Int = example(86400, 86400, ge=1, le=schema.DURATION_MAX_SECONDS)
    # STANDARD (on demand), SPOT (preemptible, cheaper) or FLEX_START (queued for scarce GPUs).
    strategy: schema.cased(str.upper, "", *STRATEGIES) = ""
    max_wait: schema.Seconds = None  # FLEX_START only
    spot: StrictBool = False  # the old spelling of strategy: SPOT
    restart_job_on_worker_restart: StrictBool = False
    disable_retries: StrictBool = False  # fail at once: no restarts, no retries on internal errors

    def settle(self):
        return {} if self.strategy else {"strategy": "SPOT" if self.spot else "STANDARD"}

    def problems(self):
        if self.spot and self.strategy != "SPOT":
            why = f"true is the old spelling of strategy: SPOT but strategy is {self.strategy}"
            yield "spot", why + ": keep strategy only (e.g. strategy: SPOT)"
        if self.max_wait is not None and self.strategy != "FLEX_START":
            yield (
                "max_wait",
                "only strategy FLEX_START waits for capacity (e.g. strategy: FLEX_START)",
            )
        if self.disable_retries and self.restart_job_on_worker_restart:
            yield (
                "disable_retries",
                "turns restart_job_on_worker_restart off on Vertex: set one of them "
                "(e.g. restart_job_on_worker_restart: false)",
            )


class ReductionServer(Model):
    """Worker pool 2 running Google's Reduction Server: faster NCCL all-reduce across nodes."""

    replica_count: Int = example(2, ge=1)
    machine_type: str = pattern(MACHINE_RE, MACHINE, "n1-highcpu-16", "n1-highcpu-16")
    image_uri: str = REDUCTION_SERVER_IMAGE

    def problems(self):
        if self.replica_count > limits.MAX_REPLICAS:
            yield "replica_count", limits.replica_problem(self.replica_count)
        for _, why in limits.machine_problems(self.machine_type, NO_ACCELERATOR, 0):
            yield "machine_type", why  # reducers have no accelerator: the machine is wrong
        why = limits.image_reference_problem(self.image_uri, need_host=True)
        if why:
            yield "image_uri", why

    def as_pool(self) -> WorkerPool:
        return WorkerPool(
            self.machine_type, replica_count=self.replica_count, image_uri=self.image_uri
        )


class JobConfig(Model):
    display_name: str = example("my-trainer", min_length=1, max_length=limits.DISPLAY_NAME_LIMIT)
    worker_pools: Annotated[tuple[WorkerPool, ...], BeforeValidator(_pools)] = example(
        "[{machine_type: n1-standard-8}]"
    )
    args: tuple[str, ...] = ()
    env: Env = Field(default_factory=dict)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    reduction_server: ReductionServer | None = None
    service_account: str = pattern(r"^[^@\s]+@[^@\s]+$", "an e-mail", SERVICE_ACCOUNT, "")
    network: str = pattern(NETWORK_RE, NETWORK, names.NETWORK_EXAMPLE, "")
    tensorboard: str = pattern(TENSORBOARD_RE, TENSORBOARD, TENSORBOARD_EG, "")
    experiment: str = pattern(EXPERIMENT_RE, EXPERIMENT, "my-trainer-runs", "")
    enable_web_access: StrictBool = False
    # Cost and capacity: labels on the jobs, a persistent resource, reserved capacity.
    labels: Labels = Field(default_factory=dict)
    persistent_resource_id: str = pattern(
        names.PERSISTENT_RESOURCE_RE, names.PERSISTENT_RESOURCE, "my-h100-cluster", ""
    )
    reservation: str = pattern(
        names.RESERVATION_RE, names.RESERVATION, names.RESERVATION_EXAMPLE, ""
    )

    @property
    def reservation_affinity(self) -> dict[str, Any] | None:
        """``job.reservation`` as aiplatform_v1's ReservationAffinity (snake_case), or None."""
        if not self.reservation:
            return None
        if self.reservation in ("any", "none"):
            kind = "ANY_RESERVATION" if self.reservation == "any" else "NO_RESERVATION"
            return {"reservation_affinity_type": kind}
        return {
            "reservation_affinity_type": "SPECIFIC_RESERVATION",
            "key": RESERVATION_KEY,
            "values": [self.reservation],
        }

    @property
    def all_pools(self) -> tuple[WorkerPool, ...]:
        """``worker_pools`` with the Reduction Server, if any, as pool 2: what Vertex gets."""
        if self.reduction_server is None:
            return self.worker_pools
        pools = list(self.worker_pools[:2]) + [_empty_pool()] * (2 - len(self.worker_pools))
        return (*pools, self.reduction_server.as_pool(), *self.worker_pools[3:])

    @property
    def reduction_server_key(self) -> str:
        """The key that asks for Google's Reduction Server: ``reduction_server``, or the
        ``image_uri`` of a pool that runs its image; '' when the job has none."""
        if self.reduction_server is not None:
            return "reduction_server"
        for number, pool in enumerate(self.worker_pools):
            if REDUCTION_SERVER_REPOSITORY in pool.image_uri and not pool.empty:
                return f"worker_pools[{number}].image_uri"
        return ""

    def problems(self):
        pools = self.worker_pools
        if len(self.all_pools) > limits.MAX_WORKER_POOLS:
            rs = " (job.reduction_server is pool 2)" if self.reduction_server is not None else ""
            yield (
                "worker_pools",
                f"{len(self.all_pools)} pools{rs}: Vertex runs {limits.MAX_WORKER_POOLS} at most "
                "(chief, workers, parameter servers, evaluators)",
            )
        for name in self.env:
            source = contract.set_by_vertex(name)
            if source:
                yield (
                    f"env.{name}",
                    f"is set by Vertex on every replica, from {source}; drop it here",
                )
        for name in (contract.EXPERIMENT_ENV, contract.EXPERIMENT_RUN_ENV):
            if self.experiment and name in self.env:
                yield (
                    f"env.{name}",
                    "is set by vertex-tools submit to name the job's Experiment run "
                    "(job.experiment): drop it here",
                )
        for number, pool in enumerate(pools):
            for field, why in pool_options.mount_problems(
                pool.nfs_mounts, pool.lustre_mounts, self.network
            ):
                yield f"worker_pools[{number}].{field}", why
        if not pools:
            yield "worker_pools", "expected a list with at least the primary pool"
        elif pools[0].empty:
            yield "worker_pools[0]", "the primary pool (the chief) cannot be empty"
        elif pools[0].replica_count != 1:
            yield (
                "worker_pools[0].replica_count",
                "must be 1 for the primary pool (e.g. 1): more replicas go to worker_pools[1]",
            )
        if self.reduction_server is not None:
            workers = pools[1] if len(pools) > 1 else _empty_pool()
            if workers.empty or not workers.accelerator_count:
                yield (
                    "reduction_server",
                    "speeds up the NCCL all-reduce of GPU workers: needs GPU workers in "
                    "worker_pools[1] (e.g. replica_count: 1, accelerator_count: 1)",
                )
            if len(pools) > 2 and not pools[2].empty:
                yield (
                    "reduction_server",
                    "pool 2 is already worker_pools[2]: use {} there or drop one",
                )
        if self.scheduling.strategy == "FLEX_START":
            yield from self._flex_start_problems()
        if self.tensorboard and self.experiment:
            yield "tensorboard", "set either tensorboard or experiment, not both"
        if self.tensorboard and not self.service_account:
            yield "service_account", "a TensorBoard instance needs a service account"
        if self.experiment and not self.service_account:
            yield (
                "service_account",
                f"Vertex AI Experiments need a service account (e.g. {SERVICE_ACCOUNT})",
            )
        yield from limits.label_problems(self.labels)
        if self.reservation not in ("", "none"):
            if self.scheduling.strategy == "FLEX_START":
                yield (
                    "reservation",
                    "FLEX_START queues for capacity instead of consuming a reservation: "
                    "use strategy STANDARD or drop the reservation",
                )
            if self.persistent_resource_id:
                yield (
                    "reservation",
                    "a job on a persistent resource runs on that resource's machines: "
                    "drop the reservation or persistent_resource_id",
                )

    def _flex_start_problems(self):
        """Dynamic Workload Scheduler's requirements (Vertex docs: schedule-jobs-dws)."""
        if self.scheduling.timeout_seconds > 7 * 86400:
            yield "scheduling.timeout_seconds", "FLEX_START jobs run 7 days at most (e.g. 604800)"
        pools = [p for p in self.all_pools if not p.empty]
        if pools and not pools[0].accelerator_count:
            yield "scheduling.strategy", "FLEX_START queues for GPUs (L4, A100, H100, H200, B200)"
        for index, pool in enumerate(self.worker_pools):
            offered = pool.accelerator_type in names.FLEX_START_ACCELERATORS
            if pool.accelerator_count and not offered:
                yield (
                    f"worker_pools[{index}].accelerator_type",
                    f"FLEX_START offers L4, A100, H100, H200 and B200 GPUs, not "
                    f"{pool.accelerator_type} (e.g. NVIDIA_L4)",
                )
        shapes = {(p.machine_type, p.accelerator_type, p.accelerator_count) for p in pools}
        if len(shapes) > 1:
            yield (
                "scheduling.strategy",
                (
                    "FLEX_START needs one machine configuration for every worker pool"
                    + (" (a Reduction Server's differs)" if self.reduction_server else "")
                ),
            )


IMAGE_URI_RE = r"^[a-z0-9.-]+(:[0-9]+)?/[^:@\s]+([:@][^\s]+)?$"  # HOST/PATH[:TAG or @DIGEST]
SERVING_IMAGE_EG = "us-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest"


class ModelConfig(Model):
    """``model:``: how a job's exported model is registered (``make upload-model``).

    A model whose display name already exists in the region gets the upload as a new version.
    """

    # empty: job.display_name
    display_name: str = example("my-trainer", "", max_length=limits.DISPLAY_NAME_LIMIT)
    description: str = example("BERT text classifier", "", max_length=2048)
    # The prebuilt prediction container that serves the export (the template sets it per
    # framework); empty refuses the upload.
    serving_image: str = pattern(IMAGE_URI_RE, "a full image URI", SERVING_IMAGE_EG, "")
    env: Env = Field(default_factory=dict)
    labels: Labels = Field(default_factory=dict)

    def problems(self):
        yield from limits.label_problems(self.labels)
        if "job_id" in self.labels:
            yield (
                "labels.job_id",
                "is set by upload-model to the job's id: use another key (e.g. source-job)",
            )
        if self.serving_image:
            why = limits.image_reference_problem(self.serving_image, need_host=True)
            if why:
                yield "serving_image", why
