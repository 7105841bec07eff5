"""The options of ``vertex-tools local-run``, with each option's help; ``cli.py`` puts them
on the command's parser, beside the options every command shares (``--config``)."""

from __future__ import annotations

import argparse
import math

from vertex_trainer_runtime import cli

from vertex_trainer_tools.local_run.drill import DEFAULT_GRACE, SIGNALS
from vertex_trainer_tools.local_run.supervisor import MAX_RESTARTS
from vertex_trainer_tools.project import CONFIG_FILE, LOCAL_JOBS, project_root
from vertex_trainer_tools.vertex_limits import MAX_REPLICAS, replica_problem


def _kill_after(value: str) -> tuple[str, float]:
    """``SECONDS`` -> ("seconds", s); ``checkpoint[:N]`` -> ("checkpoints", N), N=1 by default."""
    kind, _, count = value.strip().lower().partition(":")
    try:
        if kind == "checkpoint":
            number = int(count or 1)
            if number < 1:
                raise ValueError
            return "checkpoints", number
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0 or count:
            raise ValueError
        return "seconds", seconds
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected SECONDS, 'checkpoint' or 'checkpoint:N', got {value!r}"
        ) from None


def _replicas(value: str) -> int:
    """``--replicas``: a whole number from 1 to Vertex's limit (never 10**9 processes here)."""
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    if count > MAX_REPLICAS:
        raise argparse.ArgumentTypeError(replica_problem(count))
    return count


DESCRIPTION = (
    "Run the Vertex AI job of vertex.yaml as local processes (or containers of the image: "
    "--image), one per replica, with Vertex's environment. Trainer arguments go after '--'."
)


def default_config() -> str:
    """The project's vertex.yaml, found at or above the working directory: a job runs from
    anywhere in its project (``--config`` when not given)."""
    return str(project_root() / CONFIG_FILE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare local-run's own options on its parser (``cli.py`` adds the shared ones)."""
    add = parser.add_argument
    add(
        "--replicas",
        type=_replicas,
        default=None,
        help="total replicas: workerpool0 x1 + workerpool1 x(N-1) (default: vertex.yaml's pools)",
    )
    folder = parser.add_mutually_exclusive_group()
    folder.add_argument(
        "--resume",
        default=None,
        metavar="JOB_FOLDER|latest",
        help="rerun the job in an existing job folder, resuming from its checkpoints "
        "('latest': the folder <jobs-root>/latest names)",
    )
    folder.add_argument(
        "--output-dir",
        default=None,
        help="base output directory to use as it is (standing in for the job's gs:// "
        "baseOutputDirectory); reusing one resumes from its checkpoints",
    )
    add(
        "--jobs-root",
        default=str(project_root() / LOCAL_JOBS),
        help="where each run gets a fresh <display name>-<YYYYmmdd-HHMMSS> job folder, and "
        "the 'latest' link to it (default: outputs/local)",
    )
    add(
        "--hpt-trial",
        type=int,
        default=None,
        help="run as trial N of vertex.yaml's hpt study: <output>/N/ dirs, trial args appended",
    )
    add(
        "--hp",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix one trial value instead of drawing it (with --hpt-trial)",
    )
    add(
        "--kill-after",
        type=_kill_after,
        default=None,
        metavar="SECONDS|checkpoint[:N]",
        help="preemption drill: SIGKILL (or --kill-signal=TERM) --kill-replica once, after "
        "SECONDS or once N new complete checkpoints (default 1) are under the checkpoint dir, "
        "then restart it from the start; exits 3 if the drill never fired",
    )
    add(
        "--kill-signal",
        choices=sorted(SIGNALS),
        default="KILL",
        help="the drill's signal: KILL, a crash (the work since the last checkpoint is lost); "
        "TERM, Compute Engine's preemption notice: SIGTERM, then SIGKILL after --kill-grace "
        "seconds (a trainer saves a checkpoint in between and exits 143) (default: KILL)",
    )
    add(
        "--kill-grace",
        type=float,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"with --kill-signal=TERM: seconds from the SIGTERM to the SIGKILL (default: "
        f"{DEFAULT_GRACE:g}, as Compute Engine gives a preempted Spot VM)",
    )
    add(
        "--kill-replica",
        default="workerpool0-0",
        metavar="NAME",
        help="the replica the drill kills (default: workerpool0-0)",
    )
    add(
        "--restart-job-on-worker-restart",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="restart every replica when one restarts (default: vertex.yaml's scheduling)",
    )
    add(
        "--max-restarts",
        type=cli.non_negative_integer,
        default=MAX_RESTARTS,
        help=f"restarts of a failed replica before the job fails (default: {MAX_RESTARTS})",
    )
    add(
        "--timeout",
        type=cli.non_negative_float,
        default=None,
        help="job timeout in seconds (default: vertex.yaml's scheduling.timeout_seconds)",
    )
    add(
        "--grace",
        type=cli.non_negative_float,
        default=10.0,
        help="seconds from SIGTERM to SIGKILL when the runner stops replicas (default: 10)",
    )
    add(
        "--split-cpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give each replica its own share of this machine's CPUs, as its own VM would have "
        "(default: on)",
    )
    add(
        "--image",
        nargs="?",
        const="",
        default=None,
        metavar="REF",
        help="run each replica as a container of the built image (default REF: the tag "
        "make build gives, <image_uri>:latest) on a Docker network of the job",
    )
    add(
        "--gpus",
        default="",
        metavar="WHICH",
        help="with --image: GPUs of this machine for each replica's container, as docker run "
        "--gpus takes them (all, 2, device=0); needs the NVIDIA Container Toolkit. Processes "
        "without --image see the machine's GPUs already",
    )
    add("--module", default="trainer.task", help="the module each replica runs (trainer.task)")
    add("--job-id", default=None, help="CLOUD_ML_JOB_ID (default: random)")
    add(
        "--print-env",
        action="store_true",
        help="print each replica's command and Vertex variables, then exit without running",
    )
