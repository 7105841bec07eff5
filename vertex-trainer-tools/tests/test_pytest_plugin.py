"""The pytest plugin as a project's tests use it: its fixtures in a pytest run of their own, in a
copy of the baked project, with the stand-in trainer (``fake_trainer.py``) as the module the
emulator runs."""

from __future__ import annotations

import shutil

import pytest

from conftest import PROJECT, install_fake_trainer
from vertex_trainer_tools import pytest_plugin, testing

pytest_plugins = ["pytester"]

TESTS = """
import json, os

STATE = os.environ["FAKE_STATE"]
FAKE = ["--module=fake_trainer"]


def test_kill_and_resume(tmp_path, kill_and_resume):
    job = kill_and_resume(tmp_path / "job", ["--state", STATE, "--steps=4"], replicas=1,
                          runner_args=FAKE)
    assert job.attempts() == 2
    assert any("resuming from step 1" in line for line in job.lines(attempt=2)), job.tail()


def test_hpt_trial(tmp_path, hpt_trial):
    job = hpt_trial(tmp_path / "job", ["--state", STATE], trial=2, runner_args=FAKE)
    assert job.returncode == 0, job.tail()
    assert job.trial == "2" and job.metrics_file().parent.parent.parent.name == "2"
    argv = json.load(open(os.path.join(STATE, "workerpool0-0-1.json")))["argv"]
    assert any(arg.startswith("--") and "=" in arg for arg in argv[2:]), argv


def test_sitecustomize_hooks_every_replica(tmp_path, local_job, sitecustomize):
    env = sitecustomize("import os; print('hooked', os.environ['HOOK_WORD'])", HOOK_WORD="yes")
    job = local_job(tmp_path / "job", ["--state", STATE], runner_args=FAKE, env=env)
    assert job.returncode == 0 and "hooked yes" in job.lines(), job.tail()


def test_project_image(project_image):
    raise AssertionError("skipped without docker")
"""


@pytest.fixture
def project_copy(pytester, tmp_path, monkeypatch):
    """The baked project as pytester's folder, the stand-in trainer importable by replicas."""
    for name in ("vertex.yaml", "trainer"):
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, pytester.path / name)
        else:
            shutil.copy(source, pytester.path / name)
    state = install_fake_trainer(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_STATE", str(state))
    monkeypatch.setenv("PATH", "/nonexistent")  # no docker: project_image must skip
    pytester.makepyfile(test_fixtures=TESTS)
    return pytester


@pytest.mark.slow
def test_fixtures_run_the_drill_the_trial_and_skip_the_image_without_docker(project_copy):
    result = project_copy.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*no docker executable on PATH*"])


def test_helpers_write_what_vertex_writes(tmp_path):
    spec = testing.cluster_spec({"workerpool0": ["a:1"]}, "workerpool0", trial="3")
    assert '"trial": "3"' in spec and '"job": "{' in spec
    (tmp_path / "m").write_text('{"auc": "0.5"}\n\n{"auc": "0.75"}\n')
    assert [line["auc"] for line in testing.read_metrics(tmp_path / "m")] == ["0.5", "0.75"]
    assert testing.read_metrics(tmp_path / "none") == []


def test_sigterm_to_exit_reads_the_drill_line_and_holds_the_grace(tmp_path):
    line = "local_run | kill drill: workerpool0-0 exited 143 4.2s after SIGTERM\n"
    job = testing.LocalJob(0, line, tmp_path, "1", 1.0)
    assert job.sigterm_to_exit() == (143, 4.2)
    with pytest.raises(AssertionError):
        job.sigterm_to_exit(grace=4)
    with pytest.raises(AssertionError, match="no SIGTERM drill line for workerpool1-0"):
        job.sigterm_to_exit("workerpool1-0")


def test_make_train_local_as_make_expands_it(tmp_path):
    runner, trainer = testing.make_train_local(PROJECT, tmp_path / "out", "REPLICAS=2", "ARGS=--x")
    assert f"--output-dir={tmp_path / 'out'}" in runner and "--replicas=2" in runner
    assert trainer[-1] == "--x" and "--train-data=synthetic" in trainer


def test_run_readme_line_runs_the_readmes_drill_with_the_tests_args(tmp_path, monkeypatch):
    """The README's drill line as make expands it, the test's flags as ARGS; the drill's checks."""
    readme = (PROJECT / "README.md").read_text()
    (drill,) = [
        line.split("  #")[0].strip()
        for line in readme.splitlines()
        if line.startswith("make train-local REPLICAS=2 KILL_AFTER=checkpoint")
        and "KILL_SIGNAL" not in line
    ]
    ran = []
    lines = "local_run | starting workerpool0-0\nlocal_run | kill drill: SIGKILL to workerpool0-0"

    def run_local_job(output_dir, runner_args, trainer_args, timeout, env, project):
        ran.append((runner_args, trainer_args))
        again = "local_run | starting workerpool0-0 (attempt 2)"
        return testing.LocalJob(0 if ran[1:] else 1, f"{lines}\n{again}\n", output_dir, "1", 1.0)

    monkeypatch.setattr(pytest_plugin, "run_local_job", run_local_job)
    reported = []  # the stand-in job has no ledger: the report's checks are recorded instead
    monkeypatch.setattr(pytest_plugin, "assert_drill_report", lambda *a: reported.append(a))
    args = ["--epochs=2", "--seed=3"]
    with pytest.raises(AssertionError):  # the first run failed (exit 1)
        pytest_plugin.run_readme_line(PROJECT, drill, tmp_path / "job", args)
    config = tmp_path / "vertex.yaml"
    job = pytest_plugin.run_readme_line(PROJECT, drill, tmp_path / "job", args, config=config)
    assert job.attempts() == 2
    assert reported == [(job, "workerpool0-0", "KILL")]
    runner, trainer = ran[-1]
    assert {"--replicas=2", "--kill-after=checkpoint", "--kill-signal=KILL"} <= set(runner)
    assert f"--output-dir={tmp_path / 'job'}" in runner and f"--config={config}" in runner
    assert trainer[-2:] == args and "--train-data=synthetic" in trainer  # the Makefile's first
    with pytest.raises(AssertionError, match="is not a line of README.md"):
        pytest_plugin.run_readme_line(PROJECT, f"{drill} KILL_GRACE=5", tmp_path / "no", args)


def test_exited_after_drill_reads_another_replicas_exit(tmp_path):
    line = "local_run | kill drill: workerpool1-0 exited -15 2.5s after the SIGKILL\n"
    assert testing.LocalJob(0, line, tmp_path, "1", 1.0).exited_after_drill("workerpool1-0") == 2.5
    with pytest.raises(AssertionError, match="no drill line for workerpool0-0"):
        testing.LocalJob(0, line, tmp_path, "1", 1.0).exited_after_drill("workerpool0-0")
