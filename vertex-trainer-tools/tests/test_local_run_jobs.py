"""The local emulator: a fresh job folder per run (like a submitted Vertex job), resuming only
when asked, a kill drill that cannot fire is an error, and a Python without the trainer's
dependencies gets one line instead of a traceback per replica and restart."""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vertex_trainer_runtime import checkpoints

from conftest import PROJECT, install_fake_trainer
from vertex_trainer_tools import cli as tools_cli
from vertex_trainer_tools import contract

folders = importlib.import_module("vertex_trainer_tools.local_run.folders")
preflight = importlib.import_module("vertex_trainer_tools.local_run.preflight")
supervisor = importlib.import_module("vertex_trainer_tools.local_run.supervisor")
record = importlib.import_module("vertex_trainer_tools.local_run.record")
config = importlib.import_module("vertex_trainer_tools.config")

DISPLAY_NAME = config.load(PROJECT / "vertex.yaml").job.display_name
JOB_FOLDER = re.compile("^" + re.escape(DISPLAY_NAME) + r"-\d{8}-\d{6}(-\d+)?$")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return install_fake_trainer(tmp_path, monkeypatch)


def run_fake(capsys, root, state, *runner_args, steps=2, replicas=1, trainer_args=()):
    """``vertex-tools local-run`` in-process with the fake trainer; (status, stdout, stderr).

    ``replicas=None`` gives no --replicas (a resumed job's own count).
    """
    argv = [f"--jobs-root={root}", "--module=fake_trainer", "--grace=1"]
    if replicas is not None:
        argv.append(f"--replicas={replicas}")
    argv += [*runner_args, "--", "--state", str(state), f"--steps={steps}", *trainer_args]
    status = tools_cli.main(["local-run", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def job_folders(root: Path) -> list[Path]:
    return sorted(path for path in root.iterdir() if path.name != folders.LATEST)


def printed_folder(out: str) -> Path:
    """The job folder the runner announced at the start, which it must repeat at the end."""
    start = re.search(r"^local_run \| job folder \(base output dir\): (.+)/$", out, re.M)
    end = re.search(r"^local_run \| job folder: (.+)/$", out, re.M)
    assert start and end and start.group(1) == end.group(1), out
    return Path(start.group(1))


# --- job folders -----------------------------------------------------------------------------


def test_each_run_starts_in_a_fresh_job_folder_that_latest_names(tmp_path, fake, capsys):
    root = tmp_path / "jobs"
    status, first_out, _ = run_fake(capsys, root, fake)
    assert status == 0, first_out
    status, second_out, _ = run_fake(capsys, root, fake)
    assert status == 0, second_out

    first, second = printed_folder(first_out), printed_folder(second_out)
    assert first != second and job_folders(root) == sorted([first, second])
    assert all(JOB_FOLDER.match(folder.name) for folder in (first, second))
    assert (root / "latest").resolve() == second
    assert f"local_run | model: {second}/model/" in second_out
    # The second job did not resume the first one's checkpoints: both trained from step 0.
    assert "workerpool0-0 | resuming from step 0" in first_out
    assert "workerpool0-0 | resuming from step 0" in second_out


def test_resume_latest_reuses_the_folder_and_a_drill_that_cannot_fire_fails(tmp_path, fake, capsys):
    root = tmp_path / "jobs"
    status, out, _ = run_fake(capsys, root, fake, steps=3)
    assert status == 0, out
    finished = printed_folder(out)

    # The finished job does not run again: the drill has nothing to fire on, which must not
    # pass for a successful drill.
    status, out, _ = run_fake(
        capsys, root, fake, "--resume=latest", "--kill-after=checkpoint", steps=3
    )
    assert printed_folder_at_end(out) == finished and job_folders(root) == [finished]
    assert "starting workerpool0-0" not in out
    assert status == supervisor.DRILL_NOT_FIRED
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: kill drill did not fire: job ")
    # A job that did not finish (the runner stopped, the machine rebooted) resumes: the drill
    # fires only on a new checkpoint, and this job has none left to save.
    stopped(finished)
    status, out, _ = run_fake(
        capsys, root, fake, "--resume=latest", "--kill-after=checkpoint", steps=3
    )
    assert printed_folder(out) == finished and "workerpool0-0 | resuming from step 3" in out
    assert status == supervisor.DRILL_NOT_FIRED
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: kill drill did not fire: the job")

    # A fresh job is where the drill belongs: it fires and the job resumes after the kill.
    status, out, _ = run_fake(capsys, root, fake, "--kill-after=checkpoint", steps=3)
    assert status == 0, out
    assert "kill drill: SIGKILL to workerpool0-0 after checkpoint-1 was saved" in out
    assert printed_folder(out) != finished and (root / "latest").resolve() == printed_folder(out)


def test_resume_of_a_job_folder_by_path_and_its_errors(tmp_path, fake, capsys):
    root = tmp_path / "jobs"
    status, out, err = run_fake(capsys, root, fake, "--resume=latest")
    assert status == 2 and "ERROR: --resume: no " in err and not root.exists()
    status, out, err = run_fake(capsys, root, fake, f"--resume={tmp_path / 'nope'}")
    assert status == 2 and f"ERROR: --resume: {tmp_path / 'nope'} is not a job folder" in err

    status, out, _ = run_fake(capsys, root, fake, steps=2)
    folder = printed_folder(out)
    stopped(folder)
    status, out, _ = run_fake(capsys, root, fake, f"--resume={folder}", steps=2)
    assert status == 0 and printed_folder(out) == folder
    assert "workerpool0-0 | resuming from step 2" in out


def printed_folder_at_end(out: str) -> Path:
    found = re.findall(r"^local_run \| job folder: (.+)/$", out, re.M)
    assert len(found) == 1, out
    return Path(found[0])


def stopped(folder: Path) -> None:
    """Make ``folder``'s finished job one that stopped before its end (its record RUNNING)."""
    job = record.read(folder)
    assert job is not None and job.state == record.SUCCEEDED, f"{folder}: {job}"
    record.write(folder, record.with_state(job, record.RUNNING))


def starts(state: Path, replica: str) -> int:
    path = state / f"{replica}.starts"
    return len(path.read_text().split()) if path.exists() else 0


def test_a_resumed_job_is_the_job_its_folder_records(tmp_path, fake, capsys):
    """RESUME takes the replicas, flags and id from the job folder; refuses another count or
    other flags in one line; and never trains a job that SUCCEEDED again."""
    root = tmp_path / "jobs"
    flags = ["--seed=7"]  # as ARGS=--seed=7 after the Makefile's LOCAL_DATA_ARGS
    status, out, _ = run_fake(capsys, root, fake, replicas=2, trainer_args=flags)
    assert status == 0, out
    folder = printed_folder(out)
    first = json.loads((fake / "workerpool1-0-1.json").read_text())
    job = record.read(folder)
    assert job.state == record.SUCCEEDED and job.replica_counts == (1, 1)
    assert job.job_id == first["env"]["CLOUD_ML_JOB_ID"] and job.trainer_args[-1] == "--seed=7"

    # Finished: one line, the model where it was, exit 0, and no replica starts.
    model = folder / "model"
    model.mkdir(exist_ok=True)
    (model / "weights").write_text("trained once")
    status, out, err = run_fake(capsys, root, fake, "--resume=latest", replicas=None)
    assert status == 0 and not err, out + err
    assert f"local_run | job {job.job_id} SUCCEEDED already: nothing to train" in out
    assert f"local_run | model: {model}/" in out
    assert starts(fake, "workerpool0-0") == 1 and starts(fake, "workerpool1-0") == 1
    assert (model / "weights").read_text() == "trained once"

    # Another count or other flags: one line naming the field and the job's value.
    for runner, trainer, field in (
        (["--replicas=1"], (), "--replicas (REPLICAS=): 1, but job "),
        ([], ("--seed=8",), "trainer flags after -- (ARGS=): "),
        (["--hpt-trial=1"], (), "--hpt-trial (HPT_TRIAL=): 1, but job "),
    ):
        status, out, err = run_fake(
            capsys, root, fake, "--resume=latest", *runner, replicas=None, trainer_args=trainer
        )
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("ERROR: " + field), err
    assert (
        "has 2 (workerpool0 x1, workerpool1 x1); a resumed job keeps its spec"
        in (run_fake(capsys, root, fake, "--resume=latest", replicas=1)[2])
    )
    assert starts(fake, "workerpool0-0") == 1, "a refused resume started a replica"

    # Stopped before its end: it resumes as the job it was, 2 replicas, its flags, its id.
    stopped(folder)
    status, out, _ = run_fake(capsys, root, fake, "--resume=latest", replicas=None)
    assert status == 0 and "workerpool0-0 | resuming from step 2" in out, out
    rerun = json.loads((fake / "workerpool1-0-2.json").read_text())
    assert rerun["argv"][-1] == "--seed=7"
    assert rerun["env"]["CLOUD_ML_JOB_ID"] == job.job_id
    assert json.loads(rerun["env"]["CLUSTER_SPEC"])["cluster"].keys() == {
        "workerpool0",
        "workerpool1",
    }
    assert record.read(folder).state == record.SUCCEEDED


def test_kill_drill_on_a_replica_the_job_lacks_fails_before_anything_runs(tmp_path, capsys):
    root = tmp_path / "jobs"
    argv = [f"--jobs-root={root}", "--replicas=1", "--kill-after=5", "--kill-replica=workerpool1-0"]
    assert tools_cli.main(["local-run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ERROR: --kill-replica: workerpool1-0 is not a replica of this job "
        "(e.g. workerpool0-0); the kill drill cannot fire"
    ]
    assert not root.exists(), "nothing is written for a job that cannot run"


def test_kill_drill_due_after_the_job_ended_fails(tmp_path, fake, capsys):
    status, out, _ = run_fake(capsys, tmp_path / "jobs", fake, "--kill-after=3600")
    assert status == supervisor.DRILL_NOT_FIRED
    missed = r"^ERROR: kill drill did not fire: the job ended after [\d.]+s, before the kill"
    assert re.search(missed, out, re.M), out


def test_new_job_folders_never_collide_within_a_second(tmp_path):
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    made = [folders.new_job_folder(tmp_path, "job", now=now) for _ in range(3)]
    assert [path.name for path in made] == [
        "job-20260102-030405",
        "job-20260102-030405-2",
        "job-20260102-030405-3",
    ]


def test_latest_is_a_text_file_where_symlinks_are_unavailable(tmp_path, monkeypatch):
    first = folders.new_job_folder(tmp_path, "job")
    folders.point_latest(tmp_path, first)
    assert (tmp_path / "latest").is_symlink()

    def no_symlinks(self, target, target_is_directory=False):
        raise OSError("symlinks are not supported here")

    monkeypatch.setattr(Path, "symlink_to", no_symlinks)
    second = tmp_path / "job-2"
    second.mkdir()
    folders.point_latest(tmp_path, second)
    link = tmp_path / "latest"
    assert not link.is_symlink() and link.read_text().strip() == "job-2"
    assert folders.read_latest(tmp_path) == second.resolve()
    assert folders.resume_folder("latest", tmp_path) == second.resolve()


def test_the_drill_counts_complete_checkpoints_in_any_layout(tmp_path):
    """One folder per job (XGBoost, PyTorch) or per task (Keras): the runner asks the marker
    protocol of vertex_trainer_runtime.checkpoints instead of knowing a framework's layout."""
    root = tmp_path / "checkpoints"
    layout = {
        "checkpoint-1": True,
        "chief-0/checkpoint-2": True,
        "worker-0/checkpoint-2": True,
        "worker-0/checkpoint-3": False,  # still being written: no marker yet
        "chief-0/checkpoint-2/checkpoint-9": True,  # a checkpoint's own files are not searched
    }
    for folder, complete in layout.items():
        (root / folder).mkdir(parents=True)
        if complete:
            (root / folder / checkpoints.MARKER).write_text("{}")
    marked = contract.marked_complete(str(root))
    found = [Path(path).relative_to(root).as_posix() for path in marked]
    assert found == ["checkpoint-1", "chief-0/checkpoint-2", "worker-0/checkpoint-2"]
    assert contract.marked_complete(str(tmp_path / "none")) == []


# --- the Makefile passes the job-folder choices on -------------------------------------------


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(
    ("variables", "present", "absent"),
    [
        ([], [], ["--output-dir", "--resume"]),
        (["RESUME=latest"], ["--resume=latest"], ["--output-dir"]),
        (["OUTPUT_DIR=outputs/mine"], ["--output-dir=outputs/mine"], ["--resume"]),
    ],
)
def test_make_train_local_job_folder_flags(variables, present, absent):
    command = ["make", "-n", "--no-print-directory", "train-local", "PYTHON=python", *variables]
    line = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, check=True).stdout
    assert "-m vertex_trainer_tools local-run" in line
    assert all(flag in line for flag in present) and not any(flag in line for flag in absent)


# --- a Python without the trainer's dependencies ---------------------------------------------


def test_required_distributions_are_read_without_versions_extras_or_markers(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# comment\ntorch>=2.4\ntransformers[torch]>=4.46,<6\nxgboost-cpu~=3.2.0\n"
        "tensorflow==2.17.*  # pinned\nfoo ; python_version < '3.12'\n-r other.txt\n\n"
    )
    names = preflight.required_distributions(requirements)
    assert names == ["torch", "transformers", "xgboost-cpu", "tensorflow", "foo"]


def test_a_python_that_imports_the_module_passes_the_import_check():
    assert preflight.check(PROJECT, module="trainer.flags") == ""


def bare_venv(folder: Path) -> str:
    """A venv of this Python that sees this environment's packages (the tools, not the
    project's framework, which the tools' tests never install)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "this-environment.pth").write_text("\n".join(p for p in sys.path if p) + "\n")
    return python


@pytest.mark.skipif(sys.platform == "win32", reason="venv layout of POSIX")
def test_a_python_without_the_dependencies_gets_one_line_and_no_replica(tmp_path):
    python = bare_venv(tmp_path / "venv")
    root = tmp_path / "jobs"
    result = subprocess.run(
        [python, "-m", "vertex_trainer_tools", "local-run", f"--jobs-root={root}", "--replicas=2"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    pattern = rf"ERROR: {re.escape(python)} cannot import (\S+): run `make install` in a venv "
    match = re.fullmatch(pattern + r"and use PYTHON=\.venv/bin/python", lines[0])
    assert match, lines[0]
    # The module named is really missing for that Python.
    missing = subprocess.run([python, "-c", f"import {match.group(1)}"], capture_output=True)
    assert missing.returncode != 0
    assert "starting workerpool" not in result.stdout and "Traceback" not in result.stderr
    assert not root.exists(), "no job folder for a job that cannot start"
