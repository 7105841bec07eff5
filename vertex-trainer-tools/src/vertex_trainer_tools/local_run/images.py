"""Replicas as containers of the built image (``make train-local IMAGE=1``): what Vertex runs.

``gcloud ai custom-jobs local-run`` starts one container without the cluster environment. Here
each replica is a container of the image on a user-defined Docker network of the job, named and
reachable by its replica name (``workerpool0-0:2222``), with the environment Vertex sets on it
built by the same ``contract.replica_environment`` as for local processes, only with the
container-side values: host names of the containers in ``CLUSTER_SPEC``/``TF_CONFIG``/
``MASTER_ADDR``, and output directories under ``/gcs/BUCKET/...``, where the host's job folder
is mounted as Cloud Storage FUSE mounts the bucket on Vertex (vertex.yaml's ``base_output_dir``
``gs://BUCKET/PATH`` + the job folder's name). cloudml-hypertune writes
``/tmp/hypertune/output.metrics`` as on Vertex; that folder is the replica's
``hypertune/<replica>/`` folder of the job folder, where the runner reads the chief's metric.

The supervisor is the same: ``docker kill`` is the kill drill's SIGKILL, and ``close()`` removes
every container and the network by their label (``containers``), also after Ctrl-C; after
a SIGKILL of the runner itself, its guard process (``containers.guard_run``) does.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

from vertex_trainer_tools import containers, contract, guard
from vertex_trainer_tools.local_run.job import Job, environments, metrics_file, replica_name
from vertex_trainer_tools.local_run.launcher import (
    HOOKS_ENV,
    IDLE_PROGRAM,
    KILL_WAIT_SECONDS,
    with_hooks,
)

PORT = 2222  # each replica's port in its own container, as on Vertex
HOOKS_DIR = "/opt/local_run/hooks"  # where the test hooks of LOCAL_RUN_HOOKS are mounted
HOST_ONLY = ("CLOUD_ML_HP_METRIC_FILE", "TMPDIR")  # a replica's VM has its own /tmp
STOP_WAIT_SECONDS = KILL_WAIT_SECONDS + 10  # docker kill returns before the container is gone


def default_image(config) -> str:
    """The tag ``make build`` always gives the image it builds (``<image_uri>:latest``)."""
    return config.image_uri_with_tag("latest")


def check_image(image: str) -> str:
    """'' when the engine has ``image``, else the one line that says what to do."""
    docker = containers.docker_bin()
    try:
        found = subprocess.run(
            [docker, "image", "inspect", image],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"ERROR: {docker}: cannot run it ({error}); IMAGE=1 needs Docker"
    if found.returncode == 0:
        return ""
    lines = [line for line in found.stderr.splitlines() if line.strip()]
    if lines and "no such image" not in lines[-1].lower():
        return f"ERROR: {docker}: {lines[-1].strip()} (IMAGE=1 needs a running Docker engine)"
    return f"ERROR: no image {image}: run make build (BASE_IMAGE=... offline)"


def container_output_dir(base_output_dir: str, host_dir: str) -> str:
    """Where the job folder ``host_dir`` appears in the containers: ``/gcs/BUCKET/PATH/<name>``.

    On Vertex the job writes to ``<base_output_dir>/<display name>-<time>/`` in the bucket;
    a ``base_output_dir`` that is not a ``gs://`` URI gets a ``/gcs/local/`` stand-in bucket.
    """
    base = base_output_dir if contract.is_gcs_uri(base_output_dir) else "gs://local"
    name = os.path.basename(os.path.abspath(host_dir))
    return contract.to_fuse_path(contract.join(base, name))


def container_job(job: Job, base_output_dir: str) -> Job:
    """The job as the containers see it: replica host names and the /gcs/ output dir."""
    pools = {
        pool: [f"{replica_name(pool, index)}:{PORT}" for index in range(len(hosts))]
        for pool, hosts in job.pools.items()
    }
    output_dir = container_output_dir(base_output_dir, job.output_dir)
    return dataclasses.replace(job, pools=pools, output_dir=output_dir)


def container_environments(
    job: Job, base_output_dir: str, job_env: Mapping[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """Each replica's container env by name: job.env, then Vertex's variables (container side)."""
    envs = environments(container_job(job, base_output_dir), job_env)
    for env in envs.values():
        for name in HOST_ONLY:
            env.pop(name, None)
    return envs


class ContainerHandle:
    """One replica attempt: a detached container, its followed logs and a ``docker wait``."""

    def __init__(self, run_id: str, hostname: str):
        self.run_id, self.hostname = run_id, hostname
        self.name = containers.container_name(run_id, hostname)
        docker = containers.docker_bin()
        # Sessions of their own: Ctrl-C in the terminal reaches the runner, not these.
        self._logs = subprocess.Popen(
            [docker, "logs", "--follow", self.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._waiter = subprocess.Popen(
            [docker, "wait", self.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pid = self._waiter.pid
        self.stdout = self._logs.stdout
        self._code: int | None = None

    def poll(self) -> int | None:
        """The container's exit code once it stopped (137 after ``docker kill``)."""
        if self._code is None and self._waiter.poll() is not None:
            out, _ = self._waiter.communicate()
            words = out.split()
            # No code: the container vanished (removed by someone else): a lost VM.
            self._code = int(words[-1]) if words and words[-1].lstrip("-").isdigit() else 255
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        self._waiter.wait(timeout)
        return self.poll()

    def signal(self, signum: int) -> None:
        """``docker kill --signal``; for SIGKILL also wait (bounded) until it has stopped."""
        if self.poll() is not None:
            return
        try:
            containers.kill(self.run_id, self.hostname, signal.Signals(signum).name[3:])
        except containers.ContainerError:
            pass  # it stopped meanwhile
        if signum == signal.SIGKILL:
            try:
                self._waiter.wait(STOP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        for process in (self._logs, self._waiter):
            if process.poll() is None:
                process.kill()
                process.wait()


class ContainerLauncher:
    """Starts each replica as ``docker run IMAGE ARGS`` on the job's network (see module doc).

    ``job`` is the host-side job: its folder is mounted at ``container_dir`` (the /gcs/ path
    of ``container_output_dir``) and its ``hypertune/<replica>/`` folders at /tmp/hypertune.
    """

    def __init__(self, image: str, job: Job, base_output_dir: str, gpus: str = ""):
        self.image = image
        self.job = job
        self.container_dir = container_output_dir(base_output_dir, job.output_dir)
        self.gpus = gpus
        self.run_id = containers.new_run_id()
        self.network = ""
        self.handles: list[ContainerHandle] = []
        self._guard: guard.Guard | None = None

    def command(self, args: Sequence[str]) -> list[str]:
        return [containers.docker_bin(), "run", self.image, *args]

    def replica(self, replica, env: Mapping[str, str], args: Sequence[str]) -> containers.Replica:
        cpus = getattr(replica, "cpus", None)
        metrics = metrics_file(self.job, replica.pool, replica.index)
        env = {name: value for name, value in env.items() if name not in HOST_ONLY}
        if getattr(replica, "idle", False):
            # A replica of another image (a Reduction Server): an idle container of this image,
            # so that its host name in CLUSTER_SPEC resolves on the job's network, as on Vertex.
            return containers.Replica(
                self.image, replica.name, env, ["-c", IDLE_PROGRAM], entrypoint="python"
            )
        hooks = os.environ.get(HOOKS_ENV)
        if hooks:
            env = {**env, "PYTHONPATH": with_hooks(env, HOOKS_DIR)}
        return containers.Replica(
            self.image,
            replica.name,
            env,
            list(args),
            gcs={self.container_dir[len(contract.FUSE_ROOT) :]: self.job.output_dir},
            read_only={hooks: HOOKS_DIR} if hooks else {},
            hypertune_dir=os.path.dirname(metrics),
            gpus=self.gpus,
            cpus=",".join(map(str, sorted(cpus))) if cpus else "",
        )

    def start(self, replica, env: Mapping[str, str], args: Sequence[str]) -> ContainerHandle:
        if not self.network:
            # Before anything exists: if the runner is SIGKILLed, the guard removes it all.
            self._guard = containers.guard_run(self.run_id)
            self.network = containers.create_network(self.run_id)
        try:  # the stopped container of the replica's previous attempt
            containers.remove(self.run_id, replica.name)
        except containers.ContainerError:
            pass
        containers.start(self.replica(replica, env, args), self.run_id, self.network)
        handle = ContainerHandle(self.run_id, replica.name)
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        """Remove the job's containers and network (by label), then the followers."""
        problems = containers.cleanup(self.run_id)
        for handle in self.handles:
            handle.close()
        if self._guard is not None:
            self._guard.release()
        for problem in problems:
            print(f"WARNING: clean-up of containers vt-{self.run_id}-*: {problem}", flush=True)
