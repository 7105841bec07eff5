"""The job record: what a job folder's job is, so that rerunning it (``--resume``) is that job.

A Vertex job keeps its spec across restarts: the same worker pools, the same args, the same
id. ``local-run`` writes ``local_run.json`` into the job folder when the job starts (its
replica counts, the trainer flags given after ``--``, the full args, the HPT trial and its
id) and records how it ended. ``--resume`` takes all of that from the record, refuses a
command line that asks for another shape, and does not run a job that SUCCEEDED again
(retraining would overwrite the model it exported).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from vertex_trainer_tools.vertex_limits import MAX_REPLICAS

RECORD_FILE = "local_run.json"
RUNNING, SUCCEEDED, FAILED = "RUNNING", "SUCCEEDED", "FAILED"


@dataclass(frozen=True)
class JobRecord:
    """The spec of one local job, as its first run started it, and its last state."""

    job_id: str
    replica_counts: tuple[int, ...]  # per worker pool, as CLUSTER_SPEC lists them
    trainer_args: tuple[str, ...]  # the flags after ``--`` (make's LOCAL_DATA_ARGS and ARGS)
    args: tuple[str, ...]  # what each replica got: job.args, trainer_args, trial args
    job_args: tuple[str, ...] = ()  # vertex.yaml's job.args, as CLUSTER_SPEC's job shows them
    trial: str | None = None
    hp: tuple[str, ...] = ()  # --hp NAME=VALUE values fixed for the trial
    state: str = RUNNING

    @property
    def replicas(self) -> int:
        return sum(self.replica_counts)

    def describe_pools(self) -> str:
        """``workerpool0 x1, workerpool1 x1``: the pools of the job's replicas."""
        return ", ".join(
            f"workerpool{number} x{count}"
            for number, count in enumerate(self.replica_counts)
            if count
        )


def path(folder: str | os.PathLike) -> Path:
    return Path(folder) / RECORD_FILE


def read(folder: str | os.PathLike) -> JobRecord | None:
    """The record of the job in ``folder``; None for a folder without one (an older job).

    A record that is not one ``local-run`` wrote (corrupt, edited, another tool's file) is a
    ValueError naming the file and its first wrong field."""
    try:
        data = json.loads(path(folder).read_text(encoding="utf-8"))
        return _record_of(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ValueError(
            f"--resume: {path(folder)} is not a job record ({why}); "
            "start a new job (make train-local without RESUME)"
        ) from None


def _strings(data: dict, key: str) -> tuple[str, ...]:
    value = data.get(key, ())
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key}: not a list of strings")
    return tuple(value)


def _record_of(data) -> JobRecord:
    """A ``JobRecord`` from the record's JSON, each field checked for what ``write`` gives."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key in ("job_id", "replica_counts", "trainer_args", "args"):
        if key not in data:
            raise ValueError(f"{key}: missing")
    if not isinstance(data["job_id"], str) or not data["job_id"]:
        raise ValueError("job_id: not a job id")
    counts = data["replica_counts"]
    if (
        not isinstance(counts, list)
        or not counts
        or not all(type(count) is int and count >= 0 for count in counts)
        or counts[0] != 1
    ):
        raise ValueError("replica_counts: not [1, N, ...] (a chief, then counts >= 0)")
    if sum(counts) > MAX_REPLICAS:
        raise ValueError(f"replica_counts: more than {MAX_REPLICAS} replicas")
    trial = data.get("trial")
    if trial is not None and not isinstance(trial, str | int):
        raise ValueError("trial: not a trial id")
    state = data.get("state", RUNNING)
    if state not in (RUNNING, SUCCEEDED, FAILED):
        raise ValueError(f"state: {state!r} is not one of {RUNNING}, {SUCCEEDED}, {FAILED}")
    return JobRecord(
        job_id=data["job_id"],
        replica_counts=tuple(counts),
        trainer_args=_strings(data, "trainer_args"),
        args=_strings(data, "args"),
        job_args=_strings(data, "job_args"),
        trial=trial,
        hp=_strings(data, "hp"),
        state=state,
    )


def write(folder: str | os.PathLike, record: JobRecord) -> None:
    """Write the record whole or not at all (a rename), so a reader never sees half of it."""
    target = path(folder)
    temporary = target.with_name(f".{RECORD_FILE}.{os.getpid()}")
    data = dataclasses.asdict(record)
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, target)


def with_state(record: JobRecord, state: str) -> JobRecord:
    return dataclasses.replace(record, state=state)


def check_resume(
    record: JobRecord,
    folder: str | os.PathLike,
    replicas: int | None,
    trial: int | None,
    hp: list[str],
    trainer_args: list[str],
) -> None:
    """Refuse, in one line naming the field and the job's value, a rerun of another shape.

    The trainer flags given may be the start of the job's (``make train-local RESUME=latest``
    passes the Makefile's LOCAL_DATA_ARGS, the job also had ARGS): those are the job's own.
    """
    job = f"job {record.job_id} in {folder}"
    keep = "a resumed job keeps its spec: leave {} out, or start a new job without RESUME"
    if replicas is not None and replicas != record.replicas:
        raise ValueError(
            f"--replicas (REPLICAS=): {replicas}, but {job} has {record.replicas} "
            f"({record.describe_pools()}); " + keep.format("REPLICAS")
        )
    if trial is not None and str(trial) != (record.trial or ""):
        ran = f"trial {record.trial}" if record.trial else "no HPT trial"
        raise ValueError(
            f"--hpt-trial (HPT_TRIAL=): {trial}, but {job} is {ran}; " + keep.format("HPT_TRIAL")
        )
    if hp and tuple(hp) != record.hp:
        raise ValueError(
            f"--hp: {' '.join(hp)}, but {job} has {' '.join(record.hp) or 'none'}; "
            + keep.format("--hp")
        )
    given = tuple(trainer_args)
    if given != record.trainer_args[: len(given)]:
        raise ValueError(
            f"trainer flags after -- (ARGS=): {' '.join(given)}, but {job} has "
            f"{' '.join(record.trainer_args) or 'none'}; " + keep.format("ARGS")
        )
