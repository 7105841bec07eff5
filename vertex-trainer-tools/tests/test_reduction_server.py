"""Reduction Server (``job.reduction_server``): the local run gives every replica what Vertex
gives a job with one (pool 2 in CLUSTER_SPEC, ``ps`` in TF_CONFIG, idle reducers), ``check``
refuses it for a trainer that cannot use it. Build arguments: test_build.py."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import signal
import time

import pytest
import yaml
from vertex_trainer_runtime import runtime

from conftest import PROJECT, install_fake_trainer
from submit_helpers import can_use_reduction_server
from vertex_trainer_tools import cli as tools_cli
from vertex_trainer_tools import containers, testing

cli = importlib.import_module("vertex_trainer_tools.local_run.cli")
images = importlib.import_module("vertex_trainer_tools.local_run.images")
job_spec = importlib.import_module("vertex_trainer_tools.local_run.job")
launcher = importlib.import_module("vertex_trainer_tools.local_run.launcher")
config = importlib.import_module("vertex_trainer_tools.config")
preflight = importlib.import_module("vertex_trainer_tools.preflight")
supervisor = importlib.import_module("vertex_trainer_tools.local_run.supervisor")


@pytest.fixture
def with_reducers(tmp_path):
    return testing.with_reduction_server(PROJECT / "vertex.yaml", tmp_path / "vertex.yaml")


@pytest.mark.parametrize(
    ("configured", "replicas", "keep", "sizes"),
    [
        ([1, 1, 2], None, [2], [1, 1, 2]),
        ([1, 1, 2], 3, [2], [1, 2, 2]),
        ([1, 1, 2], 1, [2], [1, 0, 2]),
        ([1, 1, 2], 3, [], [1, 2]),
    ],
)
def test_pools_of_another_image_keep_their_count_with_replicas(configured, replicas, keep, sizes):
    assert job_spec.pool_sizes(configured, replicas, keep=keep) == sizes


def test_every_replica_sees_the_reducers_as_vertex_shows_them(with_reducers, tmp_path, capsys):
    args = tools_cli.parse(
        ["local-run", f"--config={with_reducers}", "--replicas=2", f"--output-dir={tmp_path}"]
    )
    job, _, _ = cli.build(args)
    assert "workerpool2 runs us-docker.pkg.dev/vertex-ai-restricted" in capsys.readouterr().out
    assert [len(job.pools[p]) for p in runtime.POOLS[:3]] == [1, 1, 2]
    assert job.idle_pools == ("workerpool2",)
    for pool, index in job.replicas:
        env = job_spec.replica_env(job, pool, index)
        spec, tf_config = json.loads(env["CLUSTER_SPEC"]), json.loads(env["TF_CONFIG"])
        assert spec["cluster"]["workerpool2"] == job.pools["workerpool2"]
        assert tf_config["cluster"]["ps"] == job.pools["workerpool2"]  # pool 2 is "ps" to TF
        cluster = runtime.cluster_from_env(env)
        assert cluster.reducers == job.pools["workerpool2"] and cluster.num_nodes == 2
        training = runtime.training_tf_config(cluster.tf_config)["cluster"]
        assert set(training) == {"chief", "worker"}
        if pool == "workerpool2":  # a reducer is no member of the training group
            assert "RANK" not in env and tf_config["task"]["type"] == "ps"
        else:
            assert env["WORLD_SIZE"] == "2"  # the reducers are no ranks of the world


def test_print_env_marks_the_idle_replicas(with_reducers, tmp_path, capsys):
    argv = [f"--config={with_reducers}", "--replicas=2", f"--output-dir={tmp_path}", "--print-env"]
    assert tools_cli.main(["local-run", *argv]) == 0
    out = capsys.readouterr().out
    for name in ("workerpool2-0", "workerpool2-1"):
        assert f"{name}: (another image on Vertex: idle here)" in out


def test_the_reducers_idle_through_the_job_and_stop_with_it(
    with_reducers, tmp_path, capsys, monkeypatch
):
    state = install_fake_trainer(tmp_path, monkeypatch)
    argv = [f"--config={with_reducers}", "--replicas=2", f"--output-dir={tmp_path / 'job'}"]
    argv += ["--module=fake_trainer", "--grace=30", "--", "--state", str(state)]
    argv += ["--chief-seconds=1", "--worker-seconds=1"]
    started = time.monotonic()
    status = tools_cli.main(["local-run", *argv])
    out = capsys.readouterr().out
    assert status == 0, out
    assert time.monotonic() - started < 25, "idle replicas are stopped at once, not after --grace"
    for name in ("workerpool2-0", "workerpool2-1"):
        assert f"{name} | idle: this replica runs another image on Vertex" in out
        assert not (state / f"{name}.starts").exists(), "no trainer runs in pool 2"
    assert (state / "workerpool1-0.starts").exists()


def test_an_idle_process_exits_0_on_sigterm(tmp_path):
    replica = supervisor.Replica("workerpool2", 0, ["--ignored"], {}, idle=True)
    processes = launcher.ProcessLauncher(tmp_prefix="rs-")
    try:
        handle = processes.start(replica, {}, replica.args)
        assert handle.stdout.readline().startswith(b"idle:")
        handle.signal(signal.SIGTERM)
        assert handle.wait(30) == 0
    finally:
        processes.close()


def test_an_idle_container_runs_the_image_with_another_entrypoint(tmp_path):
    job = job_spec.make_job([1, 1, 2], str(tmp_path), idle_pools=["workerpool2"])
    containers_ = images.ContainerLauncher("local/trainer:1", job, "gs://b/runs", gpus="all")
    idle = supervisor.Replica("workerpool2", 0, ["--epochs=1"], {}, idle=True)
    command = containers.run_command(containers_.replica(idle, {"A": "1"}, idle.args), "r", "n")
    image = command.index("local/trainer:1")
    assert command[image - 2 : image] == ["--entrypoint", "python"]
    assert command[image + 1 :] == ["-c", launcher.IDLE_PROGRAM]
    assert "--gpus" not in command and "--hostname" in command  # a host of the job's network
    trainer = supervisor.Replica("workerpool1", 0, ["--epochs=1"], {})
    command = containers.run_command(containers_.replica(trainer, {}, trainer.args), "r", "n")
    assert "--entrypoint" not in command and command[-1] == "--epochs=1"


# --- check: a trainer that cannot use it -----------------------------------------------------


def checked(project, data):
    (project / "vertex.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = config.load(project / "vertex.yaml")
    return [line for line in preflight.problems(cfg) if "Reduction Server" in line]


@pytest.fixture
def project(tmp_path, monkeypatch):
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    monkeypatch.chdir(copy)  # preflight reads the trainer of the project it runs in
    monkeypatch.setenv("VERTEX_TOOLS_PROJECT", str(copy))
    return copy


def test_check_refuses_it_for_xgboost_with_one_line(project):
    data = yaml.safe_load(
        testing.with_reduction_server(project / "vertex.yaml", project / "x").read_text()
    )
    (line,) = checked(project, data)
    assert "job.reduction_server: this trainer cannot use Reduction Server: XGBoost" in line
    assert re.match(r".*vertex\.yaml:\d+: job\.reduction_server: ", line)  # located
    # By hand: a pool that runs Google's image is the same request.
    data["job"]["worker_pools"].append(data["job"].pop("reduction_server"))
    data["job"]["worker_pools"][2]["image_uri"] = config.REDUCTION_SERVER_IMAGE.replace(
        "us-", "europe-"
    )
    (line,) = checked(project, data)
    assert "job.worker_pools[2].image_uri: this trainer cannot use Reduction Server" in line


def test_check_accepts_it_for_a_trainer_that_uses_nccl(project):
    can_use_reduction_server(project)  # as Keras, PyTorch
    data = yaml.safe_load(
        testing.with_reduction_server(project / "vertex.yaml", project / "x").read_text()
    )
    assert checked(project, data) == []
