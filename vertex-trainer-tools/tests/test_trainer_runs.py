"""``vertex_trainer_tools.trainer_runs``: a project's ``trainer.task`` run by its tests as a
process, as a chief and a worker with Vertex's ``CLUSTER_SPEC``, or as a call in the test's
process, here with a stand-in trainer that prints what it was given."""

from __future__ import annotations

import json
import sys

import pytest

from vertex_trainer_tools import trainer_runs
from vertex_trainer_tools.testing import without_vertex

TASK = """
import json, logging, os, sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    logging.getLogger("trainer.task").info("given %s", argv)
    task = json.loads(os.environ.get("CLUSTER_SPEC", "{}")).get("task")
    print(json.dumps({"argv": argv, "task": task, "job": os.environ.get("CLOUD_ML_JOB_ID")}))
    if "--fail" in argv:
        print("ERROR: --fail: refused on purpose", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""


def _project(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "vertex.yaml").write_text("project: p\n")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text(TASK)
    return tmp_path


def test_a_call_in_process_drops_the_callers_vertex_variables_and_captures_its_lines(
    tmp_path, monkeypatch
):
    project = _project(tmp_path)
    monkeypatch.syspath_prepend(str(project))
    for name in ("trainer", "trainer.task"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("CLUSTER_SPEC", '{"task": {"type": "workerpool1"}}')
    result = trainer_runs.run_in_process(["--fail"], monkeypatch, env={"CLOUD_ML_JOB_ID": "7"})
    assert result.returncode == 2
    assert "INFO trainer.task: given ['--fail']" in result.stderr
    assert result.stderr.rstrip().endswith("ERROR: --fail: refused on purpose")
    for name in ("trainer", "trainer.task"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_process_and_two_replicas_with_their_cluster_specs(tmp_path):
    project = _project(tmp_path / "project")
    env = without_vertex(PYTHONUNBUFFERED="1")
    failed = trainer_runs.run_trainer(["--fail"], env, timeout=120, project=project)
    assert failed.returncode == 2 and "refused on purpose" in failed.stderr

    runs = tmp_path / "runs"
    processes = trainer_runs.start_two_replicas(runs, ["--x"], env, project)
    assert trainer_runs.wait_all(processes, timeout=120) == [0, 0]
    for name, pool in (("chief", "workerpool0"), ("worker", "workerpool1")):
        assert processes[name].returncode == 0
        seen = json.loads((runs / f"{name}.log").read_text().splitlines()[-1])
        assert seen["task"]["type"] == pool and seen["job"] == "4711"
        assert seen["argv"] == [
            "--x",
            f"--model-dir={runs / name / 'model'}",
            f"--checkpoint-dir={runs / name / 'checkpoints'}",
        ]


def test_a_wrapper_program_and_a_process_past_its_timeout(tmp_path):
    project = _project(tmp_path / "project")
    env = without_vertex(PYTHONUNBUFFERED="1")
    wrapped = "import sys; print('wrapped', sys.argv[1:]); sys.exit(3)"
    log = tmp_path / "wrapped.log"
    process = trainer_runs.start_trainer(["--y"], env, log, project, code=wrapped)
    assert trainer_runs.wait_all([process], timeout=120) == [3]
    assert log.read_text() == "wrapped ['--y']\n"
    sleeper = trainer_runs.start_trainer([], env, None, project, code="import time; time.sleep(60)")
    with pytest.raises(AssertionError, match="ran past 0.5 s"):
        trainer_runs.wait_all([sleeper], timeout=0.5)
    assert sleeper.poll() is not None  # killed


REPLICA = """
import json, os, sys
spec, tf_config = json.loads(os.environ["CLUSTER_SPEC"]), json.loads(os.environ["TF_CONFIG"])
print(spec["task"]["type"], spec["task"]["index"], tf_config["task"]["type"], sys.argv[1:])
print(os.environ["TMPDIR"], os.environ["CLOUD_ML_HP_METRIC_FILE"], os.environ["WORD"])
print("AIP_MODEL_DIR" in os.environ)
sys.exit(int(sys.argv[1]))
"""


def test_run_replicas_starts_a_job_of_replicas_as_vertex_does(tmp_path):
    project = tmp_path / "project"
    (project / "trainer").mkdir(parents=True)
    (project / "trainer" / "__init__.py").write_text("")
    (project / "trainer" / "task.py").write_text(REPLICA)
    env = {"PYTHONPATH": str(project), "WORD": "hi"}
    logs = trainer_runs.run_replicas(project, tmp_path, ["3"], "job", 3, exit_code=3, env=env)
    assert [log.splitlines()[0] for log in logs] == [
        "workerpool0 0 chief ['3']",
        "workerpool1 0 worker ['3']",
        "workerpool1 1 worker ['3']",
    ]
    for replica, log in enumerate(logs):
        scratch, metrics = tmp_path / f"tmp-job-{replica}", tmp_path / f"job-{replica}.metrics"
        assert log.splitlines()[1:] == [f"{scratch} {metrics} hi", "False"]
    with pytest.raises(AssertionError):  # every replica must exit as told
        trainer_runs.run_replicas(project, tmp_path, ["0"], "again", 2, exit_code=1, env=env)
    trainer_runs.run_replicas(project, tmp_path, ["4"], "failed", 2, exit_code=None, env=env)
    with pytest.raises(AssertionError):  # None: every replica must fail
        trainer_runs.run_replicas(project, tmp_path, ["0"], "none", 2, exit_code=None, env=env)


# Writes checkpoint-2 (complete) after checkpoint-1 (no marker), then trains on, or ends at once.
CHECKPOINTS = """
import os, sys, time
from vertex_trainer_runtime import checkpoints
if sys.argv[2] == "end":
    sys.exit(0)
os.makedirs(os.path.join(sys.argv[1], "checkpoint-1"))
folder = checkpoints.path_for(sys.argv[1], 2)
os.makedirs(folder)
checkpoints.mark_complete(folder, 2)
time.sleep(60)
"""


def test_a_run_is_killed_once_its_first_checkpoint_is_complete(tmp_path):
    project, root, log = _project(tmp_path / "project"), tmp_path / "checkpoints", tmp_path / "log"
    env = without_vertex()
    process = trainer_runs.start_trainer([str(root), "train"], env, log, project, CHECKPOINTS)
    assert trainer_runs.kill_at_first_checkpoint(process, root, 120, log) == 2
    assert process.poll() is not None  # killed
    ended = trainer_runs.start_trainer([str(root), "end"], env, log, project, CHECKPOINTS)
    with pytest.raises(AssertionError, match="ended too early"):
        trainer_runs.kill_at_first_checkpoint(ended, tmp_path / "none", 120, log)
