"""The job spec: worker pools, args, trial values and ids, from vertex.yaml and the flags.

How the replicas of a job see each other (``CLUSTER_SPEC``, ``TF_CONFIG``, ``AIP_*`` ...) is
the Vertex contract (``contract.py``); this module only decides the job's shape.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vertex_trainer_tools import contract

LOOPBACK = "127.0.0.1"
# A fake project *number*: Vertex sets CLOUD_ML_PROJECT_ID to the number, not the project id.
FAKE_PROJECT_NUMBER = "123456789012"


def pool_sizes(
    configured: Sequence[int], replicas: int | None = None, keep: Sequence[int] = ()
) -> list[int]:
    """Replica count of each worker pool; ``replicas`` = 1 chief + ``replicas - 1`` workers.

    Without ``replicas`` the counts are those of ``job.worker_pools``, as submitted to Vertex.
    The pools numbered in ``keep`` (another image's: a Reduction Server) keep their configured
    counts with ``replicas`` too.
    """
    if replicas is not None:
        if replicas < 1:
            raise ValueError(f"--replicas must be >= 1, got {replicas}")
        sizes = [1, replicas - 1]
        for number in sorted(keep):
            sizes += [0] * (number + 1 - len(sizes))
            sizes[number] = int(configured[number])
        configured = sizes
    sizes = [int(size) for size in configured] or [1]
    if sizes[0] != 1:
        raise ValueError("job.worker_pools[0] (the primary replica) must have replica_count 1")
    while len(sizes) > 1 and sizes[-1] == 0:
        sizes.pop()
    return sizes


def trial_values(
    parameters: Sequence, trial: int, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Values for HPT trial ``trial``, drawn reproducibly from the study's parameters.

    ``parameters`` are ``config.Parameter``s (id, type, min, max, values, scale). Values
    are formatted as Vertex sends them: DISCRETE as floats (``64.0``), INTEGER as ints,
    DOUBLE as floats, CATEGORICAL as strings.
    """
    rng = random.Random(trial)
    values = {}
    for parameter in parameters:
        kind, scale = parameter.type, parameter.scale
        if kind in ("double", "integer"):
            low, high = float(parameter.min), float(parameter.max)
            if scale in ("log", "reverse_log") and low > 0:
                value = math.exp(rng.uniform(math.log(low), math.log(high)))
                if scale == "reverse_log":  # dense near max instead of near min
                    value = low + high - value
            else:
                value = rng.uniform(low, high)
            if kind == "integer":
                values[parameter.id] = str(min(int(high), max(int(low), round(value))))
            else:
                values[parameter.id] = repr(float(f"{value:.6g}"))
        elif kind == "discrete":
            values[parameter.id] = repr(float(rng.choice(list(parameter.values))))
        elif kind == "categorical":
            values[parameter.id] = str(rng.choice(list(parameter.values)))
        else:
            raise ValueError(f"hpt.parameters.{parameter.id}: unknown type {kind!r}")
    for name, value in (overrides or {}).items():
        if name not in values:
            raise ValueError(f"--hp {name}: not a parameter of the hpt study")
        values[name] = str(value)
    return values


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that are free on ``host`` right now.

    All sockets stay bound until every port is chosen, so the kernel never hands out the same
    port twice; nothing connects to them, so they are reusable at once after closing.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def new_job_id() -> str:
    """A numeric id shaped like a Vertex CustomJob id (19 digits)."""
    return str(random.SystemRandom().randrange(10**18, 10**19))


def replica_name(pool: str, index: int) -> str:
    """The name Cloud Logging shows for a replica: ``workerpool0-0``, ``workerpool1-2`` ..."""
    return f"{pool}-{index}"


@dataclass(frozen=True)
class Job:
    """One local emulation of a CustomJob (or of one trial of a HyperparameterTuningJob)."""

    pools: dict[str, list[str]]  # workerpool0.. -> ["127.0.0.1:port", ...]
    args: tuple[str, ...]  # configured args, then local args, then trial args
    output_dir: str  # absolute base output directory (baseOutputDirectory), no trailing /
    job_id: str
    project_number: str = FAKE_PROJECT_NUMBER
    trial: str | None = None
    job_args: tuple[str, ...] = ()  # the args of the job spec, as CLUSTER_SPEC's job shows them
    idle_pools: tuple[str, ...] = ()  # pools of another image (a Reduction Server): idle here

    @property
    def replicas(self) -> list[tuple[str, int]]:
        return [(pool, index) for pool, hosts in self.pools.items() for index in range(len(hosts))]

    @property
    def names(self) -> list[str]:
        return [replica_name(pool, index) for pool, index in self.replicas]

    @property
    def run_dir(self) -> str:
        """The output base of this job, with the ``<trial>/`` level of an HPT trial."""
        return contract.run_output_dir(self.output_dir, self.trial)

    @property
    def checkpoint_dir(self) -> str:
        return contract.join(self.run_dir, contract.CHECKPOINT_SUBDIR)

    def vertex_env(self, pool: str, index: int) -> dict[str, str]:
        """What Vertex sets on replica ``pool``/``index`` (``contract.replica_environment``)."""
        return contract.replica_environment(
            self.pools,
            pool,
            index,
            base_output_dir=self.output_dir,
            job_id=self.job_id,
            project_number=self.project_number,
            trial=self.trial,
            job_args=self.job_args,
        )

    def with_new_ports(self) -> Job:
        """The same job on fresh loopback ports, as a whole-job restart on new VMs.

        A killed process leaves its ports in TIME_WAIT for a minute; servers that bind without
        SO_REUSEADDR (XGBoost's tracker) could not listen on them again yet.
        """
        ports = iter(free_ports(len(self.replicas)))
        pools = {
            pool: [f"{LOOPBACK}:{next(ports)}" for _ in hosts] for pool, hosts in self.pools.items()
        }
        return dataclasses.replace(self, pools=pools)


def make_job(
    sizes: Sequence[int],
    output_dir: str,
    args: Sequence[str] = (),
    trial: int | str | None = None,
    job_id: str | None = None,
    ports: Sequence[int] | None = None,
    job_args: Sequence[str] | None = None,
    idle_pools: Sequence[str] = (),
) -> Job:
    """The job for pools of ``sizes`` replicas, each replica on its own loopback port."""
    total = sum(sizes)
    ports = list(ports) if ports is not None else free_ports(total)
    if len(ports) != total:
        raise ValueError(f"need {total} ports, got {len(ports)}")
    pools, next_port = {}, iter(ports)
    for number, size in enumerate(sizes):
        if size:
            pools[contract.POOLS[number]] = [f"{LOOPBACK}:{next(next_port)}" for _ in range(size)]
    return Job(
        pools=pools,
        args=tuple(args),
        output_dir=os.path.abspath(output_dir).rstrip("/") or "/",
        job_id=job_id or new_job_id(),
        trial=str(trial) if trial not in (None, "") else None,
        job_args=tuple(args if job_args is None else job_args),
        idle_pools=tuple(pool for pool in idle_pools if pool in pools),
    )


def metrics_file(job: Job, pool: str, index: int) -> str:
    """Where replica ``pool``/``index`` writes its hypertune metrics.

    Each replica of a Vertex job is a VM of its own, with its own /tmp/hypertune/output.metrics;
    a file per replica keeps local replicas (and parallel local jobs) from clashing.
    """
    return os.path.join(job.run_dir, "hypertune", replica_name(pool, index), "output.metrics")


def replica_env(job: Job, pool: str, index: int) -> dict[str, str]:
    """The Vertex variables of one replica, plus the local run's own metrics file."""
    env = job.vertex_env(pool, index)
    env["CLOUD_ML_HP_METRIC_FILE"] = metrics_file(job, pool, index)
    return env


def environments(job: Job, job_env: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Each replica's env by name: its share of this machine's cores, vertex.yaml's ``job.env``
    (the container's env on Vertex), then what Vertex sets, which always wins."""
    shared = {**threads_per_replica(len(job.replicas), job_env), **(job_env or {})}
    return {
        replica_name(pool, index): {**shared, **replica_env(job, pool, index)}
        for pool, index in job.replicas
    }


def threads_per_replica(replicas: int, job_env: Mapping[str, str] | None) -> dict[str, str]:
    """``OMP_NUM_THREADS`` of an equal share of the cores, when several replicas share this
    machine and neither the user's shell nor ``job.env`` sets it: on Vertex each replica has a
    VM of its own, here every framework's thread pool would otherwise take every core, and the
    replicas' threads wait on each other (steps ten times slower on 2 cores). And
    ``OMP_WAIT_POLICY=passive``, unless set: OpenMP threads that spin while they wait take the
    cores from the other replica (XGBoost rounds of 2 threads: 300 ms instead of 9 ms)."""
    if replicas < 2:
        return {}
    given = {**os.environ, **(job_env or {})}
    threads = {"OMP_WAIT_POLICY": "passive"} if "OMP_WAIT_POLICY" not in given else {}
    if "OMP_NUM_THREADS" not in given:
        threads["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // replicas))
    return threads
