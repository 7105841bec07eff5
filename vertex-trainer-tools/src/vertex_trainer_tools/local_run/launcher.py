"""How a replica is started: the launcher interface, and the launcher of local processes.

The supervisor only needs a handle per replica attempt; where the replica runs is the
launcher's business. ``ProcessLauncher`` runs ``python -m trainer.task ARGS`` on this machine;
``local_run.images.ContainerLauncher`` runs each replica as ``docker run`` of the built
image, with the same two methods (``start``, ``close``) and the same handle.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Protocol

from vertex_trainer_tools import contract

POLL_SECONDS = 0.1
# How long a SIGKILLed replica may take to be gone: the wait ends as soon as it is, but a
# process in uninterruptible I/O (a machine busy with image builds) can take seconds to go.
KILL_WAIT_SECONDS = 30.0


class Handle(Protocol):
    """One running attempt of one replica."""

    pid: int  # the process the runner waits on (its process group for a local process)
    stdout: IO[bytes]  # the replica's stdout and stderr, merged

    def poll(self) -> int | None:
        """The exit code once the replica's main process has exited, else None."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the main process; raises subprocess.TimeoutExpired after ``timeout``."""

    def signal(self, signum: int) -> None:
        """Signal everything of the replica (for SIGKILL: and wait until it is gone)."""


class Launcher(Protocol):
    def start(self, replica, env: Mapping[str, str], args: Sequence[str]) -> Handle:
        """Start ``replica`` (its ``.name`` and ``.cpus``) with Vertex's ``env`` and ``args``.

        ``env`` holds only what Vertex would set (plus vertex.yaml's ``job.env``); ``args`` are
        the container args (what follows ``python -m trainer.task``).
        """

    def close(self) -> None:
        """Remove what the launcher made for the job (temporary folders, networks)."""


def cpu_slices(count: int) -> list[set[int] | None]:
    """This machine's CPUs split between ``count`` replicas, as if each had a VM of its own.

    Frameworks size their thread pools by the CPUs they may use; without a split, every
    replica would start a thread per core and they would all fight over the same cores.
    ``None`` (no pinning) for one replica, fewer CPUs than replicas, or no affinity support.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return [None] * count
    if count < 2 or len(cpus) < count:
        return [None] * count
    return [set(cpus[i * len(cpus) // count : (i + 1) * len(cpus) // count]) for i in range(count)]


def process_env(
    vertex_env: Mapping[str, str],
    tmp_dir: str | None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """This machine's environment without stale contract variables, plus the replica's own.

    ``vertex_env`` (Vertex's variables and ``job.env``) wins over this machine's. ``TMPDIR``
    points at a folder of the replica's own because every replica of a Vertex job has a VM (and
    a /tmp) to itself.
    """
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        if key not in contract.CONTRACT_VARIABLES
    }
    env.update(vertex_env)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the console as they are written
    if tmp_dir:
        env["TMPDIR"] = tmp_dir
    return env


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _child_setup(cpus: set[int] | None):
    """What runs in a replica's process before it executes Python (Linux only)."""

    def setup() -> None:  # pragma: no cover - runs in the child after fork
        if _PRCTL is not None:
            # The replica gets SIGKILL if the runner itself is killed, so nothing is orphaned.
            _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup if _PRCTL is not None or cpus else None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, session id, start time) of ``pid`` from /proc, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[3]), int(fields[19])


def _running(pid: int, started: int) -> bool:
    """True while the process ``pid`` that started at ``started`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[2] == started


def replica_processes(env: Mapping[str, str], session: int) -> dict[int, int]:
    """Live processes (not this one) of a replica: {pid: start time}.

    They are the processes in the replica's ``session`` and those whose environment has the
    replica's job id and spec (they escaped into sessions of their own, as torchrun's workers
    do). Linux only: elsewhere, none.
    """
    if not os.path.isdir("/proc") or "CLOUD_ML_JOB_ID" not in env:
        return {}
    needles = [f"CLOUD_ML_JOB_ID={env['CLOUD_ML_JOB_ID']}".encode()]
    if "CLUSTER_SPEC" in env:
        needles.append(f"CLUSTER_SPEC={env['CLUSTER_SPEC']}".encode())
    found = {}
    for folder in glob.glob("/proc/[0-9]*"):
        pid = int(folder.rpartition("/")[2])
        stat = _stat(pid)
        if pid == os.getpid() or stat is None or stat[0] in ("Z", "X"):
            continue
        if stat[1] == session:
            found[pid] = stat[2]
            continue
        try:
            with open(f"{folder}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if all(needle in variables for needle in needles):
            found[pid] = stat[2]
    return found


class ProcessHandle:
    """A replica running as a local process in a process group (and session) of its own."""

    def __init__(self, process: subprocess.Popen, env: Mapping[str, str]):
        self.process = process
        self.pid = process.pid
        self.stdout = process.stdout
        self._env = dict(env)
        self._seen: dict[int, int] = {}  # every process of the replica signalled: start times

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def signal(self, signum: int) -> None:
        """Signal the replica's process group and session, and every process that escaped them.

        torchrun starts its workers in sessions of their own, so the group alone is not
        enough: the processes that carry this replica's CLOUD_ML_JOB_ID and CLUSTER_SPEC are
        found in /proc (Linux) and signalled too, like everything on a preempted VM.
        """
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        self._signal_found(signum)
        if signum != signal.SIGKILL:
            return
        # SIGKILL is delivered asynchronously, and a dying process loses its environment before
        # it is gone, so a process an earlier signal reached can no longer be found by it: wait
        # (bounded) on every process of the replica ever signalled, so a stopped job really
        # leaves no process behind.
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while time.monotonic() < deadline and (
            any(_running(pid, started) for pid, started in self._seen.items())
        ):
            time.sleep(POLL_SECONDS)
            self._signal_found(signum)

    def _signal_found(self, signum: int) -> None:
        found = replica_processes(self._env, session=self.pid)
        self._seen.update(found)
        for pid in found:
            _kill(pid, signum)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class ProcessLauncher:
    """Runs each replica as ``PYTHON -m MODULE ARGS`` in ``cwd``, with a /tmp of its own."""

    def __init__(
        self,
        module: str = "trainer.task",
        cwd: str | os.PathLike = ".",
        python: str = sys.executable,
        tmp_prefix: str | None = None,
    ):
        self.module = module
        self.cwd = str(cwd)
        self.python = python
        # Each replica's TMPDIR lives in here; close() deletes it when the job ends.
        self.tmp_root = tempfile.mkdtemp(prefix=tmp_prefix) if tmp_prefix else None

    def command(self, args: Sequence[str]) -> list[str]:
        return [self.python, "-m", self.module, *args]

    def start(self, replica, env: Mapping[str, str], args: Sequence[str]) -> ProcessHandle:
        tmp_dir = None
        if self.tmp_root:
            tmp_dir = os.path.join(self.tmp_root, replica.name)
            os.makedirs(tmp_dir, exist_ok=True)
        full_env = process_env(env, tmp_dir)
        process = subprocess.Popen(
            self.command(args),
            cwd=self.cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group
            preexec_fn=_child_setup(getattr(replica, "cpus", None)),
        )
        return ProcessHandle(process, full_env)

    def close(self) -> None:
        if self.tmp_root:
            shutil.rmtree(self.tmp_root, ignore_errors=True)
