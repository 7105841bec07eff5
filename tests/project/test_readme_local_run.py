"""The commands of the project README's "Run it locally like Vertex" section, run exactly as
written, with their defaults: all but the first, ``make train-local``, which ``make demo`` ran in
this project (its job is checked here from the demo's output). The project's own drill tests run
some of them again with their own ``ARGS`` (``run_readme_line``), for their checks of steps.

Each command runs in a copy of the project (so nothing lands in your outputs/), with this
test's Python first on PATH and as PYTHON, and must succeed: a fresh job folder per run, the
model in it, ``latest`` pointing at it, the kill drill firing, ``RESUME=latest`` reusing it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import COPY_IGNORE, DEMO_OUTPUT, PROJECT, copy_with_latest_job, run_as_typed

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

SECTION = "## Run it locally like Vertex"
RUNNER = ("make train-local", "vertex-tools local-run", "make report")


def readme_commands() -> list[str]:
    """The runner's command lines in the section's shell blocks, comments dropped."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.startswith(RUNNER):
                commands.append(shlex.join(shlex.split(line, comments=True)))
    return commands


COMMANDS = readme_commands()
FRAMEWORK = json.loads((PROJECT / ".cookiecutter.json").read_text(encoding="utf-8"))["framework"]


def test_the_section_shows_the_everyday_runs():
    made = [command for command in COMMANDS if command.startswith("make")]
    assert "make train-local" in made and "make train-local RESUME=latest" in made
    for variable in ("REPLICAS=2", "HPT_TRIAL=", "KILL_AFTER=checkpoint"):
        assert any(variable in command for command in made), variable
    # The commands users copy, exactly (each runs below): the drill that suits the framework.
    keras = FRAMEWORK == "keras"  # MultiWorkerMirroredStrategy survives a replica's restart
    drill = "KILL_AFTER=checkpoint" if keras else "KILL_AFTER=checkpoint RESTART_JOB=1"
    assert "make train-local HPT_TRIAL=3" in made
    assert f"make train-local REPLICAS=2 {drill}" in made
    notice = "KILL_SIGNAL=TERM" if keras else "KILL_SIGNAL=TERM RESTART_JOB=1"
    assert f"make train-local REPLICAS=2 KILL_AFTER=checkpoint {notice}" in made


def run(command: str, project: Path) -> subprocess.CompletedProcess:
    return run_as_typed(command, project)


def job_folder(output: str) -> Path:
    found = re.findall(r"^local_run \| job folder: (.+)/$", output, re.M)
    assert found, output[-3000:]
    return Path(found[-1])


# `make demo` ran the first one, `make train-local`, in this very project (a second run would
# only repeat it): test_the_demo_ran_make_train_local checks its job.
RUN_BY_THE_DEMO = "make train-local"


def test_the_demo_ran_make_train_local():
    """The demo's job: the only job folder of the project, ``latest`` pointing at it, the model
    in it; PyTorch's default run learned."""
    output = DEMO_OUTPUT.read_text(encoding="utf-8")
    assert RUN_BY_THE_DEMO in COMMANDS
    jobs = PROJECT / "outputs" / "local"
    folder = job_folder(output)
    assert folder.parent == jobs and (jobs / "latest").resolve() == folder
    assert [p for p in jobs.iterdir() if p.name != "latest"] == [folder]
    model = folder / "model"
    assert model.is_dir() and any(model.iterdir()), "the demo exported no model"
    assert f"local_run | model: {model}/" in output
    if FRAMEWORK == "pytorch":
        assert_learned(f"{RUN_BY_THE_DEMO} (the demo)", folder)


# Every other one runs here as written, with the Makefile's defaults, also those that the
# project's drill tests run with their own ARGS: the user copies the line as it is.
RUN_HERE = [c for c in COMMANDS if c != RUN_BY_THE_DEMO]


@pytest.mark.parametrize("command", RUN_HERE)
def test_readme_command_runs_as_written(tmp_path, command):
    project = tmp_path / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=COPY_IGNORE)
    latest = project / "outputs" / "local" / "latest"
    previous = None
    if "RESUME=latest" in command or command.startswith("make report"):
        previous = copy_with_latest_job(project)
    result = run(command, project)
    if command.startswith("make report"):  # on the demo's job: one attempt, nothing lost
        assert "goodput" in result.stdout and "0 step(s) computed again" in result.stdout
        assert (previous / "report.png").stat().st_size > 1000, result.stdout
        return
    if not command.startswith("make"):
        assert "usage: vertex-tools local-run" in result.stdout
        return
    folder = job_folder(result.stdout)
    assert folder.parent == project / "outputs" / "local"
    assert latest.resolve() == folder
    trial = re.search(r"HPT_TRIAL=(\d+)", command)
    model = folder / trial.group(1) / "model" if trial else folder / "model"
    assert model.is_dir() and any(model.iterdir()), f"no model in {model}"
    assert f"local_run | model: {model}/" in result.stdout
    if previous is not None:
        assert folder == previous, "RESUME=latest must rerun the latest job in its folder"
    else:
        others = [p for p in folder.parent.iterdir() if p.name != "latest" and p != folder]
        assert not others, "each run starts in a fresh job folder"
    if "KILL_SIGNAL=TERM" in command:
        # A preemption notice: the replica saves and exits 143, or, when the SIGTERM comes
        # after its last step, finishes (nothing left to save).
        assert re.search(r"^local_run \| kill drill: SIGTERM to \S+ after", result.stdout, re.M)
        assert re.search(r"kill drill: \S+ exited (143|0) [\d.]+s after SIGTERM", result.stdout)
        assert not re.search(r"kill drill: \S+ still running", result.stdout)
    elif "KILL_AFTER=" in command:
        assert re.search(r"^local_run \| kill drill: SIGKILL to \S+ after", result.stdout, re.M)
        assert "was killed by the drill; restarting it" in result.stdout
    if FRAMEWORK == "pytorch":
        check_pytorch_run(command, result.stdout, folder)


# The runs whose flags are the Makefile's defaults (ARGS, HPT_TRIAL and RESUME change or skip
# the training): the scratch model must learn the synthetic task. The demo's
# `make train-local` is checked by test_the_demo_ran_make_train_local.
PYTORCH_DEFAULT_RUNS = ("make train-local REPLICAS=2",)
PYTORCH_MIN_ACCURACY = 0.9


def assert_learned(command: str, folder: Path) -> None:
    """The exported model's eval accuracy, the last value reported for tuning, is >= 0.9."""
    from vertex_trainer_tools.testing import read_metrics

    (metrics,) = (folder / "hypertune" / "workerpool0-0").iterdir()
    accuracy = float(read_metrics(metrics)[-1]["accuracy"])
    print(f"{command}: final eval accuracy {accuracy}")
    assert accuracy >= PYTORCH_MIN_ACCURACY, f"{command}: final eval accuracy {accuracy}"


def check_pytorch_run(command: str, output: str, folder: Path) -> None:
    """The default run learned, and a drill interrupts it before its last step, after which the
    rerun resumes and finishes."""
    drill = "KILL_AFTER=" in command
    if command in PYTORCH_DEFAULT_RUNS or drill:
        assert_learned(command, folder)
    if not drill:
        return
    spans = [
        (int(start), int(end))
        for start, end in re.findall(r"Training from global step (\d+) to (\d+)", output)
    ]
    last_step = spans[0][1]
    if "KILL_SIGNAL=TERM" in command:
        saved = re.findall(r"notice: saved checkpoint-(\d+), exiting", output)
        assert saved, f"{command}: the SIGTERM came after training\n{output[-3000:]}"
        interrupted = int(saved[0])
    else:
        interrupted = int(
            re.findall(r"kill drill: SIGKILL to \S+ after checkpoint-(\d+)", output)[0]
        )
    print(f"{command}: interrupted at step {interrupted} of {last_step}, reruns {spans[1:]}")
    assert 0 < interrupted < last_step, f"{command}: interrupted at step {interrupted}"
    resumed = [start for start, end in spans if start > 0]
    assert resumed and max(resumed) <= last_step and resumed[0] >= interrupted, spans
