"""The job ledger: what every replica of every attempt spent its time on, for ``make report``.

A job is paid by the VM-hour across its attempts; the ledger is what lets the tools say what the
hours bought (goodput, lost work, start-up, compiling, evaluation, checkpoint stalls, waits for
peers, restart gaps). Each replica keeps short event records in memory and a background thread
writes them, a new small JSON Lines file per batch, under ``<checkpoint dir>/ledger/``: every
attempt of the job sees that folder (``AIP_CHECKPOINT_DIR``, on Vertex through the ``/gcs/``
mount, where appending to a file would rewrite the whole object). A batch is written every
``VERTEX_TRAINER_LEDGER_SECONDS`` (default 15; 0 turns the ledger off) when there is news, and
at once for the first step, a checkpoint, a preemption notice and the exit; nothing before the
first step (a run refused for bad input leaves no folder). A ``kill -9`` loses at most the last
batch; a torn last line is skipped by the reader. Where the folder is on a local disk (every run
of the emulator), the step reached is also kept in a 16-byte memory-mapped file per attempt
(``<replica>.<attempt>.<pid>.progress``: the step and its time), a store to memory per step that
the kernel keeps when the process is killed: the report's lost steps after a ``kill -9`` are then
exact. A resume never reads the ledger.

The events keep the names and meanings of Google's ``ml-goodput-measurement`` where it has one
(``job_start_time``, ``step_start_time`` with ``step_count``, ``job_end_time``), so its figures
and ours agree; ``steps`` (a range of steps and its seconds), ``pause`` (evaluation, checkpoint),
``peer_wait``, ``progress``, ``preemption_notice`` and ``checkpoint_published`` are ours. The
recording calls cost an attribute update or a list append (and the progress file's store): no
file operation per step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from vertex_trainer_runtime import goodput

logger = logging.getLogger(__name__)

FOLDER = "ledger"
CHIEF = "workerpool0-0"
SECONDS_ENV = "VERTEX_TRAINER_LEDGER_SECONDS"
STARTED_ENV = "VERTEX_TRAINER_LEDGER_STARTED"  # from a launcher to its workers (torchrun)
WAITED_ENV = "VERTEX_TRAINER_LEDGER_WAITED"  # the launcher's wait for its peers: "began ended"
DEFAULT_SECONDS = 15.0
BAD_INPUT = 2  # the trainer's exit code for bad input (vertex_trainer_runtime.task)
URGENT = frozenset({"step_start_time", "checkpoint_published", "preemption_notice", "job_end_time"})
PROGRESS = goodput.PROGRESS  # the progress file: the step reached and its time
FUSE_ROOT = "/gcs/"  # Cloud Storage FUSE uploads a file when it is closed: no progress file


def process_start_time() -> float:
    """When this process started (epoch seconds): the interpreter and the imports count as
    start-up. Linux's ``/proc``; elsewhere, now."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class Ledger:
    """The records of one replica's attempt, written in batches to ``folder`` as
    ``<replica>.<attempt>.<pid>.<batch>.jsonl``; ``attempt`` is the attempt's start in ms."""

    def __init__(
        self,
        folder: str,
        replica: str,
        seconds: float = DEFAULT_SECONDS,
        clock: Callable[[], float] = time.time,
        started: float | None = None,
    ):
        self.folder = folder
        self.replica = replica
        self.seconds = seconds
        self.clock = clock
        self.started = process_start_time() if started is None else started
        self.attempt = f"{int(self.started * 1000):013d}"  # with the pid, unique per process
        self._step = 0  # the training progress: set per step, written with each batch
        self._mark: mmap.mmap | None = None  # the progress file, once the folder exists
        self._written_step = 0
        self._pending: list[dict] = []
        self._batch = 0
        self._lock = threading.Lock()
        self._news = threading.Event()
        self._closed = False
        self._training = False  # nothing is written before the first step (see close)
        self._thread = threading.Thread(target=self._write_loop, name="ledger", daemon=True)

    def open(self, **fields) -> Ledger:
        self.record("job_start_time", at=self.started, pid=os.getpid(), **fields)
        self.record("training_prep_start_time")
        self._thread.start()
        return self

    @property
    def step(self) -> int:
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        """Set per step by the trainers' callbacks: a store into the progress file's memory."""
        self._step = value
        if self._mark is not None:
            PROGRESS.pack_into(self._mark, 0, value, self.clock())

    def record(self, event: str, at: float | None = None, **fields) -> None:
        """Keep one record, of now or of ``at``; written with the next batch (at once for
        ``URGENT`` events)."""
        entry = {"event": event, "time": self.clock() if at is None else at, **fields}
        with self._lock:
            self._pending.append(entry)
            self._training = self._training or event == "step_start_time"
        if event in URGENT or fields.get("kind") == "checkpoint":
            self._news.set()

    def steps(self, first: int, last: int, seconds: float, paused: float = 0.0, **more) -> None:
        """Steps ``first``..``last`` done in the ``seconds`` that end now, ``paused`` of them
        in evaluation or checkpoints (recorded apart as pauses)."""
        self.step = max(self.step, last)
        self.record(
            "steps", first_step=first, last_step=last, seconds=seconds, paused=paused, **more
        )

    def close(self, exit_code: int, reason: str = "") -> None:
        """The attempt's last record, written before returning. An attempt refused for bad
        input (exit 2) before its first step writes nothing: nothing half-written."""
        if self._closed:
            return
        if exit_code == BAD_INPUT and not self._training:
            with self._lock:
                self._pending = []
            self._closed = True
            return
        self._training = True  # a crash before the first step: its start-up was paid too
        self.record("job_end_time", exit_code=exit_code, reason=reason, step=self.step)
        self._closed = True
        self._news.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(10.0, self.seconds))
        else:
            self.flush()
        if exit_code == 0 and self.replica == CHIEF:
            found = goodput.so_far(self.folder)
            if found:
                logger.info(describe(found))

    def _write_loop(self) -> None:
        while not self._closed:
            self._news.wait(self.seconds)
            self._news.clear()
            self.flush()
        self.flush()

    def flush(self) -> None:
        """Write what is pending as a new file: never an append, so a reader never sees a
        file grow, and a /gcs/ object is written once."""
        with self._lock:
            if not self._training:
                return
            batch, self._pending = self._pending, []
            if self.step != self._written_step:
                batch.append({"event": "progress", "time": self.clock(), "step": self.step})
                self._written_step = self.step
            number, self._batch = self._batch, self._batch + (1 if batch else 0)
        if not batch:
            return
        name = f"{self.replica}.{self.attempt}.{os.getpid()}.{number:06d}.jsonl"
        path = os.path.join(self.folder, name)
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(path, "x", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(entry) + "\n" for entry in batch))
        except OSError as error:  # the ledger must never stop the training: it stops instead
            logger.warning("Job ledger: cannot write %s (%s): no more records", path, error)
            self._closed = True
            return
        if self._mark is None and not self.folder.startswith(FUSE_ROOT):
            self._open_mark()

    def _open_mark(self) -> None:
        """The progress file: its memory is the attempt's last step, even after a kill -9."""
        name = f"{self.replica}.{self.attempt}.{os.getpid()}.progress"
        try:
            with open(os.path.join(self.folder, name), "x+b") as handle:
                handle.write(PROGRESS.pack(self._step, self.clock()))
                handle.flush()
                mark = mmap.mmap(handle.fileno(), PROGRESS.size)
        except (OSError, ValueError) as error:  # the batches still say where training got
            logger.debug("Job ledger: no progress file (%s)", error)
            return
        PROGRESS.pack_into(mark, 0, self._step, self.clock())
        self._mark = mark


class _Off:
    """No ledger (off, or not opened): every call does nothing."""

    step = 0

    def record(self, *args, **kwargs) -> None:
        pass

    def steps(self, *args, **kwargs) -> None:
        pass

    def close(self, *args, **kwargs) -> None:
        pass


_current: Ledger | _Off = _Off()


def current() -> Ledger | _Off:
    """This process's ledger: the one ``open`` made, else one that records nothing."""
    return _current


def open_for(checkpoint_dir: str | None, cluster, environ: Mapping[str, str] | None = None):
    """Open this process's ledger under ``checkpoint_dir`` (a local or /gcs/ path).

    One lane per replica, its VM being what is paid for: under torchrun, the launcher hands its
    attempt over (``handover``) and only the node's local rank 0 records.
    """
    global _current
    environ = os.environ if environ is None else environ
    try:
        seconds = float(environ.get(SECONDS_ENV) or DEFAULT_SECONDS)
    except ValueError:
        seconds = DEFAULT_SECONDS
    if not checkpoint_dir or seconds <= 0 or environ.get("LOCAL_RANK", "0") != "0":
        return _current
    folder = os.path.join(checkpoint_dir, FOLDER)
    if isinstance(_current, Ledger):
        if _current.folder == folder:
            return _current
        _current.close(0, "another run in this process")  # in-process runs (tests, notebooks)
    try:
        inherited = float(environ.get(STARTED_ENV) or "nan")
    except ValueError:
        inherited = math.nan
    handed_over = not math.isnan(inherited)
    started = inherited if handed_over else None
    if started is None and isinstance(_current, Ledger):
        started = time.time()  # this process ran another job before: this one starts now
    _current = Ledger(folder, f"{cluster.pool}-{cluster.index}", seconds, started=started)
    _current.open(trial=cluster.trial, host=os.uname().nodename, handed_over=handed_over)
    waited = _handed_over_wait(environ.get(WAITED_ENV, "")) if handed_over else None
    if waited is not None:  # before this process existed: the launcher's rendezvous
        began, ended = waited
        _current.record("peer_wait", at=ended, what="torchrun's rendezvous", seconds=ended - began)
    return _current


def _handed_over_wait(text: str) -> tuple[float, float] | None:
    try:
        began, ended = (float(part) for part in text.split())
    except ValueError:
        return None
    return (began, ended) if math.isfinite(began) and began <= ended < math.inf else None


def figures() -> dict[str, float]:
    """The job's goodput figures so far (``goodput.so_far``), this process's records written
    first: for the end of a run (the Experiment run, TensorBoard). Empty without a ledger."""
    if not isinstance(_current, Ledger):
        return {}
    _current.flush()
    return goodput.so_far(_current.folder)


def describe(found: Mapping[str, float]) -> str:
    """One log line of ``figures``."""
    return (
        f"Job ledger: goodput {100 * found['goodput']:.1f} % so far (productive "
        f"{found['productive_seconds']:.1f} s of {found['paid_seconds']:.1f} paid VM-seconds, "
        f"{found['attempts']} attempt(s), {found['lost_steps']} step(s) lost); make report "
        "shows where the rest went"
    )


def handover() -> dict[str, str]:
    """The environment that lets the processes this one launches (torchrun's workers) record
    this attempt: its start; this process records nothing more but its end."""
    if not isinstance(_current, Ledger):
        return {}
    _current.record("handover")
    return {STARTED_ENV: repr(_current.started)}


def handover_wait(began: float, ended: float) -> dict[str, str]:
    """The environment that hands a wait for the peers from ``began`` to ``ended`` (epoch
    seconds: torchrun's rendezvous, before its workers exist) to the workers' ledger."""
    if not isinstance(_current, Ledger):
        return {}
    return {WAITED_ENV: f"{began!r} {ended!r}"}


def record(event: str, **fields) -> None:
    """Record ``event`` in this process's ledger, if it has one."""
    _current.record(event, **fields)


def close(exit_code: int, reason: str = "") -> None:
    _current.close(exit_code, reason)


@contextlib.contextmanager
def waiting_for_peers(what: str) -> Iterator[None]:
    """Record the block's seconds as a wait for the other replicas (``what``: the rendezvous)."""
    began = time.monotonic()
    try:
        yield
    finally:
        _current.record("peer_wait", what=what, seconds=time.monotonic() - began)
