"""Supervise a job's replicas the way Vertex does, and the preemption drill.

The job succeeds when workerpool0 exits 0 (the other replicas are then stopped); a failed
replica is rerun from the start up to ``max_restarts`` times; ``restart_job_on_worker_restart``
reruns every replica instead. The drill SIGKILLs one replica once, after some seconds or once
new complete checkpoints exist, to prove that training resumes from them.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vertex_trainer_tools import contract
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
        renew_env: Callable[[], dict[str, dict[str, str]]] | None = None,
        out=None,
    ):
        self.replicas = replicas
        self.launcher = launcher
        self.max_restarts = max_restarts
        self.restart_job = restart_job_on_worker_restart
        self.timeout = timeout
        self.grace = grace
        self.kill_after = kill_after
        self.kill_at_checkpoint = kill_at_checkpoint
        self.kill_replica = kill_replica
        self.checkpoint_dir = checkpoint_dir
        self.renew_env = renew_env
        self.out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._started = 0.0
        self._drill_wanted = kill_after is not None or kill_at_checkpoint > 0
        self._drill_done = not self._drill_wanted
        self._drill_fired = False
        self._drill_miss = ""  # why the drill found nothing to kill
        self._known_checkpoints: set[str] = set()
        self._saved_checkpoints: set[str] = set()
        self._stop_signal: int | None = None
        names = [replica.name for replica in replicas]
        if self._drill_wanted and kill_replica not in names:
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
        running = [replica for replica in replicas if self._reap(replica) is None]
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

    # -- the preemption drill

    def _complete_checkpoints(self) -> set[str]:
        if not self.checkpoint_dir:
            return set()
        return set(contract.marked_complete(self.checkpoint_dir))

    def _drill(self) -> None:
        if self._drill_done:
            return
        if self.kill_at_checkpoint:
            # Counted as saved, not as present: the trainer prunes all but its newest two.
            self._saved_checkpoints |= self._complete_checkpoints() - self._known_checkpoints
            if len(self._saved_checkpoints) < self.kill_at_checkpoint:
                return
            saved = sorted(
                (os.path.relpath(path, self.checkpoint_dir) for path in self._saved_checkpoints),
                key=_by_task_and_step,
            )
            why = f"after {', '.join(saved)} {'was' if len(saved) == 1 else 'were'} saved"
        elif time.monotonic() - self._started < self.kill_after:
            return
        else:
            why = f"after {self.kill_after:g}s"
        replica = next(r for r in self.replicas if r.name == self.kill_replica)
        self._drill_done = True
        if self._reap(replica) is not None:
            self._drill_miss = f"{replica.name} had already exited when it was due ({why})"
            return
        self.say(f"kill drill: SIGKILL to {replica.name} {why} (a preempted VM)")
        replica.drill_killed = True
        self._drill_fired = True
        replica.handle.signal(signal.SIGKILL)

    def _drill_missed(self) -> str:
        """Why the drill that was asked for never killed anything ('' if it did, or none asked)."""
        if not self._drill_wanted or self._drill_fired:
            return ""
        if self._drill_miss:
            return self._drill_miss
        if self.kill_at_checkpoint:
            wanted = f"{self.kill_at_checkpoint} new complete checkpoint" + (
                "s" if self.kill_at_checkpoint > 1 else ""
            )
            return (
                f"the job ended before {wanted} appeared in {self.checkpoint_dir} (a finished "
                "job resumed? start a fresh job folder, or save checkpoints more often)"
            )
        return (
            f"the job ended after {self._elapsed():.1f}s, before the kill was due at "
            f"{self.kill_after:g}s (pick a shorter KILL_AFTER)"
        )

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
            replica.add_note("killed by the drill")
            self.say(f"{replica.name} was killed by the drill; restarting it from the start")
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
                f"{replica.name} exited {exit_text(code)}; restart "
                f"{replica.failures}/{self.max_restarts}"
            )
        if self.restart_job:
            self.say("restart_job_on_worker_restart: restarting every replica")
            self._stop([r for r in self.replicas if r is not replica], "whole-job restart")
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
        self._known_checkpoints = self._complete_checkpoints()
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
                self._drill()
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
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        self._summary(status, detail)
        missed = self._drill_missed() if status == 0 else ""
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


def _by_task_and_step(relative: str) -> tuple[str, int]:
    """``chief-0/checkpoint-20`` sorts by its task folder, then by step: 20 before 150."""
    folder, name = os.path.split(relative)
    match = contract.CHECKPOINT_NAME.match(name)
    return folder, int(match.group(1)) if match else -1
