"""How a replica is started: the launcher interface, and the launcher of local processes.

The supervisor only needs a handle per replica attempt; where the replica runs is the
launcher's business. ``ProcessLauncher`` runs ``python -m trainer.task ARGS`` on this machine;
``local_run.images.ContainerLauncher`` runs each replica as ``docker run`` of the built
image, with the same two methods (``start``, ``close``) and the same handle.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Protocol

import psutil

from vertex_trainer_tools import contract, guard

POLL_SECONDS = 0.1
# What a replica of another image runs here (Google's Reduction Server image cannot run on this
# machine): it holds its place in the job, as CLUSTER_SPEC shows it, until it is stopped.
# os._exit: a second SIGTERM (the group's, then the process's own) must not catch it exiting.
IDLE_PROGRAM = (
    "import os, signal; signal.signal(signal.SIGTERM, lambda *_: os._exit(0)); "
    "print('idle: this replica runs another image on Vertex', flush=True); signal.pause()"
)
# How long a SIGKILLed replica may take to be gone: the wait ends as soon as it is, but a
# process in uninterruptible I/O (a machine busy with image builds) can take seconds to go.
KILL_WAIT_SECONDS = 30.0
# A folder of test hooks for every replica (the tools' ``replica_hooks``, a ``sitecustomize``),
# which a test names: last on each replica's Python path, mounted read-only into containers.
HOOKS_ENV = "LOCAL_RUN_HOOKS"


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


def with_hooks(env: Mapping[str, str], folder: str) -> str:
    """``env``'s PYTHONPATH with the test hooks' ``folder`` last: a test's own sitecustomize
    earlier on the path comes first."""
    return os.pathsep.join(filter(None, [env.get("PYTHONPATH"), folder]))


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
    base = os.environ if base is None else base
    env = {key: value for key, value in base.items() if key not in contract.CONTRACT_VARIABLES}
    env.update(vertex_env)
    if base.get(HOOKS_ENV):
        env["PYTHONPATH"] = with_hooks(env, base[HOOKS_ENV])
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the console as they are written
    if tmp_dir:
        env["TMPDIR"] = tmp_dir
    return env


def _running(pid: int, started: float) -> bool:
    """True while the process ``pid`` that started at ``started`` exists and is not a zombie."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def replica_processes(env: Mapping[str, str], session: int) -> dict[int, float]:
    """Live processes (not this one) of a replica: {pid: start time}.

    They are the processes in the replica's ``session`` and those whose environment has the
    replica's job id and spec (they escaped into sessions of their own, as torchrun's workers
    do).
    """
    if "CLOUD_ML_JOB_ID" not in env:
        return {}
    wanted = {key: env[key] for key in ("CLOUD_ML_JOB_ID", "CLUSTER_SPEC") if key in env}
    found = {}
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if _session(process.pid) == session:
                found[process.pid] = process.create_time()
                continue
            variables = process.environ()
            if all(variables.get(key) == value for key, value in wanted.items()):
                found[process.pid] = process.create_time()
        except psutil.Error:  # gone, or another user's
            continue
    return found


def job_processes(job_id: str) -> list[psutil.Process]:
    """Live processes whose environment carries this job's CLOUD_ML_JOB_ID."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
                continue
            if process.environ().get("CLOUD_ML_JOB_ID") == job_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _guard(job_id: str) -> int:
    """The process behind the launcher's guard: if the runner died, SIGKILL the job's processes."""
    if guard.released():
        return 0
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        left = job_processes(job_id)
        if not left:
            return 0
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=POLL_SECONDS * 10)
    return 1


class ProcessHandle:
    """A replica running as a local process in a process group (and session) of its own."""

    def __init__(self, process: subprocess.Popen, env: Mapping[str, str]):
        self.process = process
        self.pid = process.pid
        self.stdout = process.stdout
        self._env = dict(env)
        self._seen: dict[int, float] = {}  # every process of the replica signalled: start times

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def signal(self, signum: int) -> None:
        """Signal the replica's process group and session, and every process that escaped them.

        torchrun starts its workers in sessions of their own, so the group alone is not
        enough: the processes that carry this replica's CLOUD_ML_JOB_ID and CLUSTER_SPEC are
        found (psutil) and signalled too, like everything on a preempted VM.
        """
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        # Once per process: a second SIGTERM can land in a trainer's cleanup after it has
        # handled the first (torchrun's agent raises on every one it gets).
        self._signal_found(signum, skip_group=True)
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

    def _signal_found(self, signum: int, skip_group: bool = False) -> None:
        found = replica_processes(self._env, session=self.pid)
        self._seen.update(found)
        for pid in found:
            if not (skip_group and _group(pid) == self.pid):
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
        job_id: str | None = None,
    ):
        self.module = module
        self.cwd = str(cwd)
        self.python = python
        # Each replica's TMPDIR lives in here; close() deletes it when the job ends.
        self.tmp_root = tempfile.mkdtemp(prefix=tmp_prefix) if tmp_prefix else None
        # Replicas of a runner killed outright (SIGKILL, the OOM killer) are stopped too.
        self.guard = guard.Guard(__name__, job_id) if job_id else None

    def command(self, args: Sequence[str]) -> list[str]:
        return [self.python, "-m", self.module, *args]

    def start(self, replica, env: Mapping[str, str], args: Sequence[str]) -> ProcessHandle:
        tmp_dir = None
        if self.tmp_root:
            tmp_dir = os.path.join(self.tmp_root, replica.name)
            os.makedirs(tmp_dir, exist_ok=True)
        full_env = process_env(env, tmp_dir)
        idle = getattr(replica, "idle", False)
        process = subprocess.Popen(
            [self.python, "-c", IDLE_PROGRAM] if idle else self.command(args),
            cwd=self.cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group
        )
        cpus = getattr(replica, "cpus", None)
        if cpus and hasattr(psutil.Process, "cpu_affinity"):
            try:  # set before the interpreter starts its threads, which inherit it
                psutil.Process(process.pid).cpu_affinity(sorted(cpus))
            except psutil.Error:
                pass
        return ProcessHandle(process, full_env)

    def close(self) -> None:
        if self.guard:
            self.guard.release()
        if self.tmp_root:
            shutil.rmtree(self.tmp_root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "guard":
        sys.exit("usage: python -m vertex_trainer_tools.local_run.launcher guard JOB_ID")
    sys.exit(_guard(sys.argv[2]))
