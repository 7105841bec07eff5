"""The preemption drill: one replica is preempted once, as Compute Engine would, then rerun.

Two shapes. The crash drill (``KILL``, the default) SIGKILLs the replica: it loses what it did
since its last checkpoint. The preemption notice (``TERM``) has Compute Engine's shape: SIGTERM,
then SIGKILL once ``grace`` seconds have passed (Compute Engine stops a Spot VM about 30 s after
the notice); a trainer that saves a checkpoint on SIGTERM loses nothing. The drill fires after
some seconds or once new complete checkpoints exist, and reports how long after the SIGTERM the
first new complete checkpoint appeared and the replica exited.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from vertex_trainer_tools import contract

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}
# Compute Engine stops a preempted VM about 30 s after its SIGTERM (ACPI soft-off).
DEFAULT_GRACE = 30.0


def by_task_and_step(relative: str) -> tuple[str, int]:
    """``chief-0/checkpoint-20`` sorts by its task folder, then by step: 20 before 150."""
    folder, name = os.path.split(relative)
    match = contract.CHECKPOINT_NAME.match(name)
    return folder, int(match.group(1)) if match else -1


class Drill:
    """Fires once on ``replica`` (a name) after ``after_seconds`` or ``at_checkpoint`` new
    complete checkpoints under ``checkpoint_dir``; ``signal_name`` is ``KILL`` or ``TERM``."""

    def __init__(
        self,
        replica: str,
        after_seconds: float | None = None,
        at_checkpoint: int = 0,
        checkpoint_dir: str | None = None,
        signal_name: str = "KILL",
        grace: float = DEFAULT_GRACE,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ):
        if signal_name not in SIGNALS:
            raise ValueError(f"kill signal {signal_name!r} is not one of {', '.join(SIGNALS)}")
        self.replica = replica
        self.after_seconds = after_seconds
        self.at_checkpoint = at_checkpoint
        self.checkpoint_dir = checkpoint_dir
        self.signal_name = signal_name
        self.grace = grace
        self.say = say
        self.clock = clock
        self.wanted = after_seconds is not None or at_checkpoint > 0
        self.done = not self.wanted  # nothing left to fire
        self.fired = False
        self.miss = ""  # why the drill found nothing to kill
        self.term_at: float | None = None  # when the SIGTERM went out, until the replica is gone
        self.fired_at: float | None = None  # when the drill signalled its replica
        self._term_handle = None  # the attempt it went to
        self._known: set[str] = set()
        self._saved: set[str] = set()
        self._started = 0.0
        self._others: dict[str, object] = {}  # the other replicas' attempts when it fired

    def complete_checkpoints(self) -> set[str]:
        if not self.checkpoint_dir:
            return set()
        return set(contract.marked_complete(self.checkpoint_dir))

    def start(self) -> None:
        self._started = self.clock()
        self._known = self.complete_checkpoints()

    def _relative(self, paths) -> list[str]:
        names = (os.path.relpath(path, self.checkpoint_dir) for path in paths)
        return sorted(names, key=by_task_and_step)

    def _due(self) -> str | None:
        """Why the drill fires now, or None while it is not due."""
        if self.at_checkpoint:
            # Counted as saved, not as present: the trainer prunes all but its newest two.
            self._saved |= self.complete_checkpoints() - self._known
            if len(self._saved) < self.at_checkpoint:
                return None
            saved = self._relative(self._saved)
            return f"after {', '.join(saved)} {'was' if len(saved) == 1 else 'were'} saved"
        if self.clock() - self._started < self.after_seconds:
            return None
        return f"after {self.after_seconds:g}s"

    def poll(self, replicas, reap: Callable) -> None:
        """Fire when due; after a SIGTERM, report the new checkpoint and SIGKILL after grace;
        once fired, report when each other replica's attempt of that moment exits."""
        if self.term_at is not None:
            self._follow(next(r for r in replicas if r.name == self.replica), reap)
        if self._others:
            self._follow_others(replicas, reap)
        if self.done:
            return
        why = self._due()
        if why is None:
            return
        replica = next(r for r in replicas if r.name == self.replica)
        self.done = True
        if reap(replica) is not None:
            self.miss = f"{replica.name} had already exited when it was due ({why})"
            return
        self.fired = True
        self.fired_at = self.clock()
        self._others = {r.name: r.handle for r in replicas if r is not replica}
        replica.drill_killed = True
        if self.signal_name == "TERM":
            self.say(
                f"kill drill: SIGTERM to {replica.name} {why} (a preemption notice; "
                f"SIGKILL in {self.grace:g}s)"
            )
            self.term_at = self.clock()
            self._known = self.complete_checkpoints()
            self._term_handle = replica.handle
            replica.handle.signal(signal.SIGTERM)
            return
        self.say(f"kill drill: SIGKILL to {replica.name} {why} (a preempted VM)")
        replica.handle.signal(signal.SIGKILL)

    def finish(self, replicas, reap: Callable) -> None:
        """At the job's end: report what followed a SIGTERM still being watched."""
        if self.term_at is not None:
            self._follow(next(r for r in replicas if r.name == self.replica), reap)
        if self._others:
            self._follow_others(replicas, reap)

    def _follow_others(self, replicas, reap: Callable) -> None:
        """No replica outlives its job: how long each other replica ran on after the drill."""
        for replica in replicas:
            handle = self._others.get(replica.name)
            if handle is None:
                continue
            if replica.handle is handle:
                reap(replica)
            code = handle.poll()
            if code is None:
                continue
            del self._others[replica.name]
            self.say(
                f"kill drill: {replica.name} exited {code} {self.clock() - self.fired_at:.1f}s "
                f"after the SIG{self.signal_name} to {self.replica}"
            )

    def _follow(self, replica, reap: Callable) -> None:
        """The grace period after the SIGTERM: new complete checkpoints, the exit, the SIGKILL."""
        seconds = self.clock() - self.term_at
        new = self.complete_checkpoints() - self._known
        if new:
            self._known |= new
            names = ", ".join(self._relative(new))
            self.say(f"kill drill: {names} complete {seconds:.1f}s after SIGTERM")
        handle = self._term_handle
        # Exited (and maybe already rerun by the supervisor: then its handle is a new one).
        if replica.handle is not handle or reap(replica) is not None:
            code = handle.poll()
            self.say(f"kill drill: {replica.name} exited {code} {seconds:.1f}s after SIGTERM")
            self.term_at = None
        elif seconds >= self.grace:
            self.say(
                f"kill drill: {replica.name} still running {self.grace:g}s after SIGTERM: SIGKILL"
            )
            self.term_at = None
            handle.signal(signal.SIGKILL)

    def since_fired(self) -> str:
        """' (12.3s after the kill drill)' once it fired, for the exits that follow; else ''."""
        if self.fired_at is None:
            return ""
        return f" ({self.clock() - self.fired_at:.1f}s after the kill drill)"

    def missed(self) -> str:
        """Why the drill that was asked for never fired ('' if it did, or none was asked)."""
        if not self.wanted or self.fired:
            return ""
        if self.miss:
            return self.miss
        if self.at_checkpoint:
            wanted = f"{self.at_checkpoint} new complete checkpoint" + (
                "s" if self.at_checkpoint > 1 else ""
            )
            return (
                f"the job ended before {wanted} appeared in {self.checkpoint_dir} (a finished "
                "job resumed? start a fresh job folder, or save checkpoints more often)"
            )
        return (
            f"the job ended after {self.clock() - self._started:.1f}s, before the kill was due "
            f"at {self.after_seconds:g}s (pick a shorter KILL_AFTER)"
        )
