"""Supervise a job's replicas the way Vertex does, and the preemption drill.

The job succeeds when workerpool0 exits 0 (the other replicas are then stopped); a failed
replica is rerun from the start up to ``max_restarts`` times; ``restart_job_on_worker_restart``
reruns every replica instead. The drill (``local_run.drill``) SIGKILLs one replica once, or
sends it SIGTERM and SIGKILL after a grace period, after some seconds or once new complete
checkpoints exist, to prove that training resumes from them.
"""

from __future__ import annotations

import collections
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vertex_trainer_runtime import preemption

from vertex_trainer_tools.local_run.drill import DEFAULT_GRACE, Drill
from vertex_trainer_tools.local_run.job import replica_name
from vertex_trainer_tools.local_run.launcher import POLL_SECONDS, Handle, Launcher

# Vertex reruns a failed replica up to 5 times before it gives up on it.
MAX_RESTARTS = 5
# Exit code of trainer.task for bad input (and of argparse for bad flags): rerunning the same
# code on the same input cannot help, so the job fails at once instead of 6 times.
PERMANENT_EXIT_CODES = (2,)
TAIL_LINES = 15
# run()'s status when the job ended but the kill drill it was asked for never fired.
DRILL_NOT_FIRED = 3
# What a trainer exits with after it saved a checkpoint on SIGTERM.
PREEMPTED_EXIT_CODE = preemption.EXIT_CODE


def exit_text(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


@dataclass
class Replica:
    """One replica (restarted in place, like a Vertex VM rerunning its code)."""

    pool: str
    index: int
    args: list[str]  # the container args: what follows ``python -m trainer.task``
    env: dict[str, str]  # what Vertex sets on it, and vertex.yaml's job.env
    handle: Handle | None = None
    attempts: int = 0
    failures: int = 0
    exit_code: int | None = None
    note: str = ""
    drill_killed: bool = False
    exit_handled: bool = False
    cpus: set[int] | None = None  # CPUs of its own (see launcher.cpu_slices); None: all
    idle: bool = False  # runs another image (a Reduction Server): here it only holds its place
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return replica_name(self.pool, self.index)

    def add_note(self, note: str) -> None:
        """What happened to the replica, for the summary: ``killed by the drill; exited 0``."""
        self.note = f"{self.note}; {note}" if self.note else note


class JobFailed(Exception):
    pass


class Supervisor:
    """Starts (through ``launcher``), watches, restarts and stops the replicas of one job.

    Stopping a replica stops whatever it started (torchrun's workers, data loaders): SIGTERM
    first, SIGKILL after ``grace`` seconds.
    """

    def __init__(
        self,
        replicas: list[Replica],
        launcher: Launcher,
        max_restarts: int = MAX_RESTARTS,
        restart_job_on_worker_restart: bool = False,
        timeout: float | None = None,
        grace: float = 10.0,
        kill_after: float | None = None,
        kill_at_checkpoint: int = 0,
        kill_replica: str = "workerpool0-0",
        checkpoint_dir: str | None = None,
        kill_signal: str = "KILL",
        kill_grace: float = DEFAULT_GRACE,
        renew_env: Callable[[], dict[str, dict[str, str]]] | None = None,
        out=None,
    ):
        self.replicas = replicas
        self.launcher = launcher
        self.max_restarts = max_restarts
        self.restart_job = restart_job_on_worker_restart
        self.timeout = timeout
        self.grace = grace
        self.renew_env = renew_env
        self.out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._started = 0.0
        self.drill = Drill(
            kill_replica,
            after_seconds=kill_after,
            at_checkpoint=kill_at_checkpoint,
            checkpoint_dir=checkpoint_dir,
            signal_name=kill_signal,
            grace=kill_grace,
            say=self.say,
        )
        self._stop_signal: int | None = None
        names = [replica.name for replica in replicas]
        if self.drill.wanted and kill_replica not in names:
            raise ValueError(f"--kill-replica {kill_replica!r} is not one of {', '.join(names)}")

    # -- output

    def say(self, message: str) -> None:
        self._write(f"local_run | {message}")

    def _write(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def _pump(self, replica: Replica, stream) -> None:
        """Copy a replica's output to the console, each line prefixed with the replica's name."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            replica.tail.append(line)
            self._write(f"{replica.name} | {line}")
        stream.close()

    # -- replicas

    def _start(self, replica: Replica) -> None:
        replica.attempts += 1
        replica.exit_code = None
        replica.exit_handled = False
        replica.drill_killed = False
        replica.tail.clear()
        attempt = f" (attempt {replica.attempts})" if replica.attempts > 1 else ""
        self.say(f"starting {replica.name}{attempt}")
        replica.handle = self.launcher.start(replica, replica.env, replica.args)
        replica.reader = threading.Thread(
            target=self._pump, args=(replica, replica.handle.stdout), daemon=True
        )
        replica.reader.start()

    def _reap(self, replica: Replica) -> int | None:
        """Poll; once the replica's main process has exited, kill what is left of it."""
        if replica.handle is None or replica.exit_code is not None:
            return replica.exit_code
        code = replica.handle.poll()
        if code is not None:
            replica.handle.signal(signal.SIGKILL)  # what is left of the replica
            if replica.reader is not None:
                replica.reader.join(timeout=5)
            replica.exit_code = code
        return code

    def _stop(self, replicas: list[Replica], reason: str, wait_first: float = 0.0) -> None:
        """Stop ``replicas``: optionally wait, then SIGTERM, then SIGKILL after the grace period."""
        started = [replica for replica in replicas if replica.handle is not None]
        running = [replica for replica in started if self._reap(replica) is None]
        if not running:
            return
        deadline = time.monotonic() + wait_first
        while time.monotonic() < deadline and any(self._reap(r) is None for r in running):
            time.sleep(POLL_SECONDS)
        for replica in running:
            if replica.exit_code is not None:
                replica.add_note(f"exited {exit_text(replica.exit_code)}")
        running = [replica for replica in running if self._reap(replica) is None]
        if not running:
            return
        self.say(f"stopping {', '.join(r.name for r in running)} ({reason}): SIGTERM")
        for replica in running:
            replica.add_note(f"stopped: {reason}")
            replica.handle.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(self._reap(r) is None for r in running):
            time.sleep(POLL_SECONDS)
        for replica in running:
            if self._reap(replica) is None:
                self.say(f"{replica.name} still running after {self.grace:g}s: SIGKILL")
                replica.handle.signal(signal.SIGKILL)
                replica.handle.wait()
                self._reap(replica)

    # -- the job

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def _on_exit(self, replica: Replica, code: int) -> None:
        """A replica exited: Vertex reruns a failed one from the start, up to a limit."""
        if code == 0:
            replica.add_note("exited 0")
            self.say(f"{replica.name} exited 0")
            return
        if replica.drill_killed:
            if self.drill.signal_name == "KILL":
                replica.add_note("killed by the drill")
                self.say(f"{replica.name} was killed by the drill; restarting it from the start")
            else:
                replica.add_note(f"SIGTERM by the drill, exited {exit_text(code)}")
                self.say(
                    f"{replica.name} exited {exit_text(code)} after the drill's SIGTERM; "
                    "restarting it from the start"
                )
        else:
            replica.failures += 1
            replica.add_note(f"exited {exit_text(code)}")
            if code in PERMANENT_EXIT_CODES:
                raise JobFailed(f"{replica.name} exited {code} (bad input or flags): not restarted")
            if replica.failures > self.max_restarts:
                raise JobFailed(
                    f"{replica.name} failed {replica.failures} times (limit: "
                    f"{self.max_restarts} restarts); last exit code {exit_text(code)}"
                )
            self.say(
                f"{replica.name} exited {exit_text(code)}{self.drill.since_fired()}; restart "
                f"{replica.failures}/{self.max_restarts}"
            )
        if self.restart_job:
            self.say("restart_job_on_worker_restart: restarting every replica")
            # After a preemption notice the others save and exit too: let them, then stop them.
            wait = self.grace if code == PREEMPTED_EXIT_CODE else 0.0
            others = [r for r in self.replicas if r is not replica]
            self._stop(others, "whole-job restart", wait_first=wait)
            if self.renew_env is not None:
                envs = self.renew_env()
                for other in self.replicas:
                    other.env = envs[other.name]
                self.say("the restarted job gets fresh loopback ports")
            for other in self.replicas:
                self._start(other)
        else:
            self._start(replica)

    def _handle_signal(self, signum, frame) -> None:
        self._stop_signal = signum

    def run(self) -> int:
        """Run the job to its end: 0 when workerpool0 succeeded, 1 failed, 124 timed out,
        ``DRILL_NOT_FIRED`` when it succeeded but the kill drill asked for never fired."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                previous[signum] = signal.signal(signum, self._handle_signal)
        self._started = time.monotonic()
        self.drill.start()
        chief = self.replicas[0]
        status, detail = 1, ""
        try:
            for replica in self.replicas:
                self._start(replica)
            while True:
                if self._stop_signal is not None:
                    status = 128 + self._stop_signal
                    detail = f"interrupted by {signal.Signals(self._stop_signal).name}"
                    self._stop(self.replicas, "interrupted")
                    break
                if self.timeout is not None and self._elapsed() > self.timeout:
                    status, detail = 124, f"timed out after {self.timeout:g}s"
                    self._stop(self.replicas, "job timeout")
                    break
                self.drill.poll(self.replicas, self._reap)
                if self._reap(chief) == 0:
                    chief.add_note("succeeded")
                    status, detail = 0, f"{chief.name} exited 0"
                    others = [r for r in self.replicas if r is not chief]
                    trainers = [r for r in others if not r.idle]
                    self._stop(trainers, "the job succeeded", wait_first=self.grace)
                    self._stop([r for r in others if r.idle], "the job succeeded")
                    break
                for replica in self.replicas:
                    if self._reap(replica) is not None and not replica.exit_handled:
                        replica.exit_handled = True
                        self._on_exit(replica, replica.exit_code)
                time.sleep(POLL_SECONDS)
        except JobFailed as failure:
            status, detail = 1, str(failure)
            self._stop(self.replicas, "the job failed")
        finally:
            self._stop(self.replicas, "the runner is exiting")
            self.drill.finish(self.replicas, self._reap)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        self._summary(status, detail)
        missed = self.drill.missed() if status == 0 else ""
        if missed:
            self._write(f"ERROR: kill drill did not fire: {missed}")
            return DRILL_NOT_FIRED
        return status

    def _summary(self, status: int, detail: str) -> None:
        verdict = {0: "SUCCEEDED", 124: "TIMED OUT"}.get(status, "FAILED")
        self.say(f"job {verdict} after {self._elapsed():.1f}s: {detail}")
        width = max(len(r.name) for r in self.replicas)
        for replica in self.replicas:
            self.say(
                f"  {replica.name:<{width}}  attempts {replica.attempts}  "
                f"exit {exit_text(replica.exit_code):<13} {replica.note}"
            )
        if status != 0:
            failed = [r for r in self.replicas if r.failures and r.tail]
            for replica in failed[:2]:
                self.say(f"last lines of {replica.name}:")
                for line in replica.tail:
                    self._write(f"  {replica.name} | {line}")
