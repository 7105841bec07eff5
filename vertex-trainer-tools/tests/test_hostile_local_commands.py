"""``local-run`` and ``predict-local`` given what a user may give them.

Two tables of hostile input -> the one line it must give: each case runs the command in-process
(nothing here starts a replica or a model server: every refusal comes first), then the output must
hold no traceback, at most 2 ``ERROR:`` lines, one of them the expected one, exit 2, and nothing
new on disk. ``{tmp}`` in a case is the test's folder, prepared by ``prepare()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT
from vertex_trainer_tools import cli as tools_cli

RECORD = {
    "job_id": "1234",
    "replica_counts": [1],
    "trainer_args": [],
    "args": [],
    "state": "FAILED",
}


def record(**changes) -> str:
    return json.dumps({**RECORD, **changes})


def prepare(tmp: Path) -> None:
    """What the cases point at: a file, job folders with damaged records, requests, models."""
    (tmp / "file.txt").write_text("not a folder\n")
    for name, content in {
        "corrupt": "{not json",
        "foreign": json.dumps({"name": "another tool's file"}),
        "list": "[1, 2]",
        "chief": record(replica_counts=[2]),
        "huge": record(replica_counts=[1, 10**9]),
        "args": record(args=[1, 2]),
        "state": record(state="DONE"),
        "job_id": record(job_id=None),
    }.items():
        (tmp / name).mkdir()
        (tmp / name / "local_run.json").write_text(content)
    (tmp / "latin1").mkdir()
    (tmp / "latin1" / "local_run.json").write_bytes(b'{"job_id": "caf\xe9"}')
    (tmp / "record_dir" / "local_run.json").mkdir(parents=True)
    (tmp / "bad.yaml").write_text("job: [unclosed\n")
    config = yaml.safe_load((PROJECT / "vertex.yaml").read_text())
    config["job"]["env"] = {"CLUSTER_SPEC": "{}"}  # Vertex's to set: the emulator's too
    (tmp / "vertex_env.yaml").write_text(yaml.safe_dump(config))
    requests = {
        "not_json.json": b"{instances: [1]}",
        "empty.json": b"",
        "null.json": b"null",
        "list.json": b"[[1, 2]]",
        "no_instances.json": b'{"rows": [[1]]}',
        "empty_instances.json": b'{"instances": []}',
        "string_instances.json": b'{"instances": "1,2"}',
        "bad_parameters.json": b'{"instances": [[1]], "parameters": 3}',
        "latin1.json": b'{"instances": [["z\xfcrich"]]}',
        "utf16.json": '{"instances": [[1]]}'.encode("utf-16"),
        "huge_int.json": b'{"instances": [[' + b"9" * 5000 + b"]]}",
        "good.json": b'{"instances": [[1.0, 2.0]]}',
    }
    for name, content in requests.items():
        (tmp / name).write_bytes(content)
    (tmp / "folder.json").mkdir()
    (tmp / "no_artifact").mkdir()
    (tmp / "no_artifact" / "model.pkl").write_bytes(b"\x80")
    (tmp / "saved").mkdir()
    (tmp / "saved" / "saved_model.pb").write_bytes(b"\x00\x01 truncated")


# (name, local-run arguments, the line it must give)
LOCAL_RUN = [
    ("replicas 0", ["--replicas=0"], "--replicas: expected a whole number >= 1, got '0'"),
    ("replicas -1", ["--replicas=-1"], "--replicas: expected a whole number >= 1, got '-1'"),
    ("replicas abc", ["--replicas=abc"], "--replicas: expected a whole number >= 1, got 'abc'"),
    ("replicas 1.5", ["--replicas=1.5"], "--replicas: expected a whole number >= 1, got '1.5'"),
    ("replicas empty", ["--replicas="], "--replicas: expected a whole number >= 1, got ''"),
    (
        "replicas 10^9",
        ["--replicas=1000000000"],
        "--replicas: 1000000000 replicas: more than 1000 would exceed",
    ),
    (
        "job.env sets CLUSTER_SPEC",
        ["--config={tmp}/vertex_env.yaml"],
        "job.env.CLUSTER_SPEC: is set by Vertex on every replica, from the worker pools",
    ),
    ("resume missing", ["--resume={tmp}/nope"], "--resume: {tmp}/nope is not a job folder"),
    ("resume a file", ["--resume={tmp}/file.txt"], "--resume: {tmp}/file.txt is not a job folder"),
    ("resume latest of none", ["--resume=latest"], "--resume: no {tmp}/jobs/latest yet"),
    (
        "resume corrupt record",
        ["--resume={tmp}/corrupt"],
        "--resume: {tmp}/corrupt/local_run.json is not a job record (Expecting property name",
    ),
    (
        "resume foreign record",
        ["--resume={tmp}/foreign"],
        "--resume: {tmp}/foreign/local_run.json is not a job record (job_id: missing)",
    ),
    ("resume record a list", ["--resume={tmp}/list"], "local_run.json is not a job record (not a"),
    (
        "resume record of 2 chiefs",
        ["--resume={tmp}/chief"],
        "{tmp}/chief/local_run.json is not a job record (replica_counts: not [1, N, ...]",
    ),
    (
        "resume record of 10^9 replicas",
        ["--resume={tmp}/huge"],
        "{tmp}/huge/local_run.json is not a job record (replica_counts: more than 1000",
    ),
    (
        "resume record args not text",
        ["--resume={tmp}/args"],
        "{tmp}/args/local_run.json is not a job record (args: not a list of strings)",
    ),
    (
        "resume record unknown state",
        ["--resume={tmp}/state"],
        "{tmp}/state/local_run.json is not a job record (state: 'DONE' is not one of",
    ),
    (
        "resume record without job id",
        ["--resume={tmp}/job_id"],
        "{tmp}/job_id/local_run.json is not a job record (job_id: not a job id)",
    ),
    (
        "resume record not utf-8",
        ["--resume={tmp}/latin1"],
        "{tmp}/latin1/local_run.json is not a job record ('utf-8' codec can't decode",
    ),
    (
        "resume record a folder",
        ["--resume={tmp}/record_dir"],
        "{tmp}/record_dir/local_run.json is not a job record (Is a directory)",
    ),
    ("resume and output dir", ["--resume=latest", "--output-dir={tmp}/out"], "not allowed with"),
    (
        "args unknown flag",
        ["--", "--no-such-flag=3"],
        "ARGS: '--no-such-flag=3': the trainer has no flag --no-such-flag",
    ),
    (
        "args bad value",
        ["--", "--num-boost-round=abc"],
        "ARGS: --num-boost-round=abc: ",
    ),
    ("args negative", ["--", "--max-depth=-1"], "ARGS: --max-depth=-1: "),
    ("args stray value", ["--", "train.csv"], "ARGS: train.csv: 'train.csv' is no flag"),
    ("kill after soon", ["--kill-after=soon"], "--kill-after: expected SECONDS, 'checkpoint'"),
    ("kill after nan", ["--kill-after=nan"], "--kill-after: expected SECONDS, 'checkpoint'"),
    ("kill after -5", ["--kill-after=-5"], "--kill-after: expected SECONDS, 'checkpoint'"),
    ("kill after checkpoint:0", ["--kill-after=checkpoint:0"], "got 'checkpoint:0'"),
    ("kill signal INT", ["--kill-signal=INT"], "--kill-signal: invalid choice: 'INT'"),
    ("kill grace -1", ["--kill-grace=-1"], "--kill-grace must be >= 0 seconds, got -1"),
    ("kill grace nan", ["--kill-grace=nan"], "--kill-grace must be >= 0 seconds, got nan"),
    ("kill grace abc", ["--kill-grace=abc"], "--kill-grace: invalid float value: 'abc'"),
    (
        "kill replica absent",
        ["--kill-after=5", "--kill-replica=workerpool1-7"],
        "--kill-replica: workerpool1-7 is not a replica of this job",
    ),
    ("timeout -5", ["--timeout=-5"], "--timeout: expected a number >= 0, got '-5'"),
    ("timeout inf", ["--timeout=inf"], "--timeout: expected a finite number, got 'inf'"),
    ("grace nan", ["--grace=nan"], "--grace: expected a finite number, got 'nan'"),
    ("max restarts -1", ["--max-restarts=-1"], "--max-restarts: expected an integer >= 0"),
    ("hpt trial 0", ["--hpt-trial=0"], "--hpt-trial counts from 1"),
    ("hpt trial abc", ["--hpt-trial=abc"], "--hpt-trial: invalid int value: 'abc'"),
    ("hp without a trial", ["--hp=max_depth=3"], "--hp needs --hpt-trial"),
    ("config missing", ["--config={tmp}/nope.yaml"], "{tmp}/nope.yaml: cannot read it"),
    ("config not yaml", ["--config={tmp}/bad.yaml"], "{tmp}/bad.yaml:"),
    ("gpus without image", ["--gpus=all"], "--gpus (GPUS=) is for container runs"),
    (
        "jobs root a file",
        ["--module=fake_trainer", "--jobs-root={tmp}/file.txt"],
        "{tmp}/file.txt: cannot make the job folder there (File exists)",
    ),
    (
        "output dir a file",
        ["--module=fake_trainer", "--output-dir={tmp}/file.txt"],
        "{tmp}/file.txt: cannot make the job folder there (File exists)",
    ),
    (
        "output dir under a file",
        ["--module=fake_trainer", "--output-dir={tmp}/file.txt/job"],
        "{tmp}/file.txt/job: cannot make the job folder there (Not a directory)",
    ),
]

# (name, predict-local arguments, the line it must give)
PREDICT_LOCAL = [
    ("no request", ["--instances={tmp}/nope.json"], "{tmp}/nope.json: No such file or directory"),
    ("request a folder", ["--instances={tmp}/folder.json"], "{tmp}/folder.json: Is a directory"),
    ("request not json", ["--instances={tmp}/not_json.json"], "{tmp}/not_json.json: not JSON"),
    ("request empty", ["--instances={tmp}/empty.json"], "{tmp}/empty.json: not JSON"),
    ("request null", ["--instances={tmp}/null.json"], "{tmp}/null.json: not a JSON object"),
    ("request a list", ["--instances={tmp}/list.json"], "{tmp}/list.json: not a JSON object"),
    (
        "no instances",
        ["--instances={tmp}/no_instances.json"],
        "{tmp}/no_instances.json: instances: missing",
    ),
    (
        "empty instances",
        ["--instances={tmp}/empty_instances.json"],
        "{tmp}/empty_instances.json: instances: not a non-empty list",
    ),
    (
        "instances a string",
        ["--instances={tmp}/string_instances.json"],
        "{tmp}/string_instances.json: instances: not a non-empty list",
    ),
    (
        "parameters a number",
        ["--instances={tmp}/bad_parameters.json"],
        "{tmp}/bad_parameters.json: parameters: not an object",
    ),
    (
        "latin-1 request",
        ["--instances={tmp}/latin1.json"],
        "{tmp}/latin1.json: not UTF-8 text (byte 0xfc at offset 18)",
    ),
    ("utf-16 request", ["--instances={tmp}/utf16.json"], "{tmp}/utf16.json: not UTF-8 text"),
    ("5000-digit number", ["--instances={tmp}/huge_int.json"], "{tmp}/huge_int.json: not JSON"),
    ("no --instances", [], "--instances"),
    ("unknown option", ["--instances={tmp}/good.json", "--port=8080"], "unrecognized arguments"),
    (
        "model dir missing",
        ["--instances={tmp}/good.json", "--model-dir={tmp}/nowhere"],
        "{tmp}/nowhere: no such model dir",
    ),
    (
        "model dir a file",
        ["--instances={tmp}/good.json", "--model-dir={tmp}/file.txt"],
        "{tmp}/file.txt: no such model dir",
    ),
    (
        "model dir without an export",
        ["--instances={tmp}/good.json", "--model-dir={tmp}/no_artifact"],
        "{tmp}/no_artifact: no saved_model.pb, model.bst, config.json",
    ),
    (
        "truncated saved_model.pb",
        ["--instances={tmp}/good.json", "--model-dir={tmp}/saved"],
        "{tmp}/saved: not a SavedModel TensorFlow can load (Error parsing message with type",
    ),
]


def fake_tensorflow(monkeypatch) -> None:
    """A ``tensorflow`` whose loader refuses a damaged export as TensorFlow's does (a protobuf
    DecodeError): the tools' tests have no TensorFlow, and the case is the tools' handling."""

    def load(path):
        raise OSError(f"Error parsing message with type 'tensorflow.SavedModel'\n  {path}")

    module = types.ModuleType("tensorflow")
    module.saved_model = types.SimpleNamespace(load=load)
    monkeypatch.setitem(sys.modules, "tensorflow", module)


def on_disk(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def check_refusal(status, out: str, err: str, line: str) -> None:
    assert "Traceback" not in out + err, err
    errors = [text for text in err.splitlines() if text.startswith("ERROR:")]
    assert status == 2 and 1 <= len(errors) <= 2, (status, err)
    assert any(line in text for text in errors), f"{line!r} not in {err!r}"


@pytest.mark.parametrize(("name", "argv", "line"), LOCAL_RUN, ids=[case[0] for case in LOCAL_RUN])
def test_local_run_refuses_hostile_input_in_one_line(tmp_path, capsys, name, argv, line):
    prepare(tmp_path)
    before = on_disk(tmp_path)
    argv = [part.format(tmp=tmp_path) for part in argv]
    own = [f"--jobs-root={tmp_path / 'jobs'}", f"--config={PROJECT / 'vertex.yaml'}"]
    try:
        status = tools_cli.main(["local-run", *own, *argv])
    except SystemExit as exit_:  # argparse's refusals
        status = exit_.code
    out, err = capsys.readouterr()
    check_refusal(status, out, err, line.format(tmp=tmp_path))
    assert on_disk(tmp_path) == before  # no job folder, no latest link, no record


@pytest.mark.parametrize(
    ("name", "argv", "line"), PREDICT_LOCAL, ids=[case[0] for case in PREDICT_LOCAL]
)
def test_predict_local_refuses_hostile_input_in_one_line(
    tmp_path, capsys, monkeypatch, name, argv, line
):
    prepare(tmp_path)
    fake_tensorflow(monkeypatch)
    monkeypatch.chdir(tmp_path)  # the default model dir is outputs/local/latest/model under it
    before = on_disk(tmp_path)
    argv = [part.format(tmp=tmp_path) for part in argv]
    if not any(part.startswith("--model-dir") for part in argv):
        argv.append(f"--model-dir={tmp_path / 'no_artifact'}")
    try:
        status = tools_cli.main(["predict-local", *argv])
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    check_refusal(status, out, err, line.format(tmp=tmp_path))
    assert out == "" and on_disk(tmp_path) == before


def test_the_hostile_tables_are_large():
    assert len(LOCAL_RUN) >= 40 and len(PREDICT_LOCAL) >= 15


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_local_run_in_a_read_only_jobs_root_is_one_line(tmp_path, capsys):
    root = tmp_path / "jobs"
    root.mkdir(mode=0o500)
    argv = ["--module=fake_trainer", f"--jobs-root={root}", f"--config={PROJECT / 'vertex.yaml'}"]
    status = tools_cli.main(["local-run", *argv])
    out, err = capsys.readouterr()
    check_refusal(status, out, err, f"{root}")
    assert "Permission denied" in err and list(root.iterdir()) == []


def test_the_command_line_gives_one_line_not_argparse_usage(tmp_path):
    """Through ``vertex-tools`` itself, as ``make train-local REPLICAS=abc`` runs it."""
    command = [sys.executable, "-m", "vertex_trainer_tools", "local-run", "--replicas=abc"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "ERROR: argument --replicas: expected a whole number >= 1, got 'abc' "
        "(see vertex-tools local-run --help)\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"", b'{"learner": {"attributes": {', b"\x00\xffbinary"])
def test_a_model_bst_xgboost_cannot_load_is_one_line(tmp_path, capsys, content):
    """Through the prediction image's xgboost (``envs.xgboost_env``, made once per machine)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.bst").write_bytes(content)
    (tmp_path / "request.json").write_text('{"instances": [[1.0, 2.0]]}')
    argv = [f"--instances={tmp_path / 'request.json'}", f"--model-dir={tmp_path / 'model'}"]
    status = tools_cli.main(["predict-local", *argv])
    out, err = capsys.readouterr()
    line = f"{tmp_path / 'model'}/model.bst: not a model XGBoost can load ("
    check_refusal(status, out, err, line)
