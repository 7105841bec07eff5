"""Run a job's replicas as Docker containers, the way Vertex runs them: one container per
replica on a network of their own, reachable by host name, with ``gs://BUCKET/...`` readable
and writable through ``/gcs/BUCKET/...`` (a host folder mounted there, as Cloud Storage FUSE
is on Vertex).

Building blocks only (the local runner plugs them in as a launcher)::

    with containers.job() as run:                 # a unique run id; everything cleaned after
        network = containers.create_network(run)
        spec = containers.Replica(image, "workerpool0-0", env, gcs={"bucket": out_dir})
        containers.start(spec, run, network)
        logs = containers.stream_logs(run, spec.hostname, print)
        code = containers.wait(run, spec.hostname)

Every container, network and volume carries the label ``vertex-trainer.run=<run id>``;
``cleanup(run)`` (called by ``job()`` in ``finally``) removes all of them, so nothing is left
behind even after a failure or Ctrl-C. A process killed outright (SIGKILL, the OOM killer) runs
no ``finally``: a guard process (``guard_run``) removes its run's containers then. The
executable can be swapped with ``DOCKER``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from vertex_trainer_tools import guard
from vertex_trainer_tools.contract import FUSE_ROOT
from vertex_trainer_tools.errors import FAILED, ToolError

LABEL = "vertex-trainer.run"

HYPERTUNE_DIR = "/tmp/hypertune"  # cloudml-hypertune writes output.metrics here on Vertex
NAME_PREFIX = "vt"


class ContainerError(ToolError):
    """Docker refused or failed a command of the job: one line, whose move it is not ours."""

    def __init__(self, line: str):
        super().__init__(f"Docker: {line}", exit_code=FAILED)
        self.line = line


@dataclass
class Replica:
    """One replica: ``hostname`` is the name the other replicas reach it by (the host part of
    its CLUSTER_SPEC entry); ``gcs`` maps bucket names (or ``BUCKET/PATH``) to host folders
    mounted at /gcs/BUCKET (or /gcs/BUCKET/PATH);
    ``hypertune_dir`` (a host folder) receives /tmp/hypertune/output.metrics."""

    image: str
    hostname: str
    env: Mapping[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()
    gcs: Mapping[str, str] = field(default_factory=dict)
    hypertune_dir: str = ""
    gpus: str = ""  # e.g. "all": --gpus for a replica with accelerators
    cpus: str = ""  # e.g. "0,1": --cpuset-cpus, the CPUs of the replica's own "VM"
    user: str = ""  # default: this machine's uid:gid, so written files stay the user's
    entrypoint: str = ""  # instead of the image's ENTRYPOINT (``args`` are then its arguments)
    read_only: Mapping[str, str] = field(default_factory=dict)  # host folder: container path


def docker_bin() -> str:
    return os.environ.get("DOCKER", "docker")


def new_run_id() -> str:
    return uuid.uuid4().hex[:10]


def label(run_id: str) -> str:
    return f"{LABEL}={run_id}"


def network_name(run_id: str) -> str:
    return f"{NAME_PREFIX}-{run_id}"


def container_name(run_id: str, hostname: str) -> str:
    """Unique on this machine (parallel jobs), while ``hostname`` stays the short name."""
    return f"{NAME_PREFIX}-{run_id}-{hostname}"


def _run(command: list[str], what: str) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ContainerError(f"{what}: {error}") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise ContainerError(f"{what}: {lines[-1] if lines else f'exit {result.returncode}'}")
    return result.stdout.strip()


def network_command(run_id: str) -> list[str]:
    return [docker_bin(), "network", "create", "--label", label(run_id), network_name(run_id)]


def create_network(run_id: str) -> str:
    """A user-defined bridge network: its DNS resolves each replica's host name."""
    _run(network_command(run_id), "cannot create the job's network (docker network create)")
    return network_name(run_id)


def _default_user() -> str:
    return f"{os.getuid()}:{os.getgid()}" if hasattr(os, "getuid") else ""


def run_command(replica: Replica, run_id: str, network: str) -> list[str]:
    """``docker run --detach`` of one replica (env values pass as --env NAME=VALUE)."""
    command = [docker_bin(), "run", "--detach", "--init"]
    command += ["--name", container_name(run_id, replica.hostname)]
    command += ["--hostname", replica.hostname, "--network", network]
    command += ["--network-alias", replica.hostname, "--label", label(run_id)]
    user = replica.user or _default_user()
    if user and user != "0:0":
        command += ["--user", user, "--env", "HOME=/tmp"]  # no home folder for a foreign uid
    for bucket, folder in sorted(replica.gcs.items()):
        command += ["--volume", f"{os.path.abspath(folder)}:{FUSE_ROOT}{bucket}"]
    if replica.hypertune_dir:
        command += ["--volume", f"{os.path.abspath(replica.hypertune_dir)}:{HYPERTUNE_DIR}"]
    for folder, path in sorted(replica.read_only.items()):
        command += ["--volume", f"{os.path.abspath(folder)}:{path}:ro"]
    if replica.gpus:
        command += ["--gpus", replica.gpus]
    if replica.cpus:
        command += ["--cpuset-cpus", replica.cpus]
    for name, value in replica.env.items():
        command += ["--env", f"{name}={value}"]
    if replica.entrypoint:
        command += ["--entrypoint", replica.entrypoint]
    return [*command, replica.image, *replica.args]


def start(replica: Replica, run_id: str, network: str) -> str:
    """Start the replica's container; returns its container name."""
    for folder in [*replica.gcs.values(), replica.hypertune_dir]:
        if folder:
            os.makedirs(folder, exist_ok=True)
    what = f"cannot start the container of {replica.hostname} (docker run)"
    _run(run_command(replica, run_id, network), what)
    return container_name(run_id, replica.hostname)


def kill(run_id: str, hostname: str, signal: str = "KILL") -> None:
    """Kill a replica's container (a preempted VM): the container stays for ``wait``."""
    name = container_name(run_id, hostname)
    _run([docker_bin(), "kill", f"--signal={signal}", name], f"docker kill {name}")


def wait(run_id: str, hostname: str) -> int:
    """Block until the replica's container stops; its exit code (137 after SIGKILL)."""
    name = container_name(run_id, hostname)
    try:
        result = subprocess.run([docker_bin(), "wait", name], capture_output=True, text=True)
    except OSError as error:
        raise ContainerError(f"docker wait {name}: {error}") from None
    if result.returncode != 0:
        raise ContainerError(f"docker wait {name}: {result.stderr.strip()}")
    return int(result.stdout.strip().splitlines()[-1])


def remove(run_id: str, hostname: str) -> None:
    """Remove a stopped replica's container (before starting it again under the same name)."""
    name = container_name(run_id, hostname)
    _run([docker_bin(), "rm", "--force", "--volumes", name], f"docker rm {name}")


def stream_logs(run_id: str, hostname: str, sink: Callable[[str], None]) -> threading.Thread:
    """Follow the container's stdout and stderr, one ``sink(line)`` call per line, on a
    thread that ends when the container stops."""
    name = container_name(run_id, hostname)
    command = [docker_bin(), "logs", "--follow", name]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            sink(line.rstrip("\n"))
        process.wait()

    thread = threading.Thread(target=pump, name=f"logs-{hostname}", daemon=True)
    thread.start()
    return thread


def _labelled(kind: list[str], run_id: str) -> list[str]:
    command = [docker_bin(), *kind, "--quiet", "--filter", f"label={label(run_id)}"]
    return _run(command, f"docker {kind[0]} ls").split()


def cleanup(run_id: str) -> list[str]:
    """Remove every container, network and volume of the run (by label); returns what could
    not be removed, as one line each (empty when all went)."""
    problems = []
    steps = [
        (["container", "ls", "--all"], ["container", "rm", "--force", "--volumes"]),
        (["network", "ls"], ["network", "rm"]),
        (["volume", "ls"], ["volume", "rm", "--force"]),
    ]
    for listing, removal in steps:
        try:
            ids = _labelled(listing, run_id)
            if ids:
                _run([docker_bin(), *removal, *ids], f"docker {' '.join(removal[:2])}")
        except ContainerError as error:
            problems.append(error.line)
    return problems


@contextlib.contextmanager
def job(run_id: str = "") -> Iterator[str]:
    """A run id whose containers, network and volumes are all removed on the way out."""
    run_id = run_id or new_run_id()
    try:
        yield run_id
    finally:
        for problem in cleanup(run_id):
            print(f"WARNING: clean-up of run {run_id}: {problem}", flush=True)


def guard_run(run_id: str) -> guard.Guard:
    """Removes the run's containers and network if this process dies before ``release()``."""
    return guard.Guard("vertex_trainer_tools.containers", run_id)


def _guard(run_id: str) -> int:
    """``python -m vertex_trainer_tools.containers guard RUN_ID``, behind ``guard_run``."""
    if guard.released():
        return 0
    try:
        left = _labelled(["container", "ls", "--all"], run_id)
    except ContainerError:
        left = []
    problems = cleanup(run_id)
    if left:
        print(
            f"containers: the process that ran {NAME_PREFIX}-{run_id}-* was killed; "
            f"removed {len(left)} container(s) and the network",
            file=sys.stderr,
            flush=True,
        )
    for problem in problems:
        print(f"WARNING: clean-up of run {run_id}: {problem}", file=sys.stderr, flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "guard":
        sys.exit("usage: python -m vertex_trainer_tools.containers guard RUN_ID")
    sys.exit(_guard(sys.argv[2]))
