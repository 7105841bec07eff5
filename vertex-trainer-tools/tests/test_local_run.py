"""The local emulator: the environment it gives each replica, held field by field
against the Vertex contract (supervision is in test_local_run_supervisor.py)."""

from __future__ import annotations

import importlib
import json
import os

import pytest
from vertex_trainer_runtime import runtime

from conftest import PROJECT
from vertex_trainer_tools import cli as tools_cli

job_spec = importlib.import_module("vertex_trainer_tools.local_run.job")
launcher = importlib.import_module("vertex_trainer_tools.local_run.launcher")
cli = importlib.import_module("vertex_trainer_tools.local_run.cli")
config = importlib.import_module("vertex_trainer_tools.config")

JOB_ID = "1234567890123456789"
BASE = "/outputs/run-1"


# --- the environment of each replica, field by field -----------------------------------------


def expected_env(sizes, ports, pool, index, trial=None):
    """What Vertex documents that replica ``pool``/``index`` gets (training docs: distributed
    training, code requirements), written out by hand as the oracle."""
    hosts, next_port = {}, iter(ports)
    for number, size in enumerate(sizes):
        if size:
            hosts[f"workerpool{number}"] = [f"127.0.0.1:{next(next_port)}" for _ in range(size)]
    run_dir = f"{BASE}/{trial}" if trial else BASE
    task = {"type": pool, "index": index}
    if trial:
        task["trial"] = str(trial)
    env = {
        "AIP_MODEL_DIR": f"{run_dir}/model/",
        "AIP_CHECKPOINT_DIR": f"{run_dir}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{run_dir}/logs/",
        "CLOUD_ML_JOB_ID": JOB_ID,
        "CLUSTER_SPEC": {"cluster": hosts, "environment": "cloud", "task": task},
    }
    if sum(sizes) > 1:  # TF_CONFIG only on multi-replica jobs, with chief/worker/ps keys
        tf_names = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps"}
        tf_task = {"type": {**tf_names, "workerpool3": "evaluator"}[pool], "index": index}
        if trial:
            tf_task["trial"] = str(trial)
        env["TF_CONFIG"] = {
            "cluster": {tf_names[name]: list(h) for name, h in hosts.items() if name in tf_names},
            "environment": "cloud",
            "task": tf_task,
        }
        training = hosts.get("workerpool0", []) + hosts.get("workerpool1", [])
        if pool in ("workerpool0", "workerpool1") and len(training) > 1:
            # WORLD_SIZE = number of nodes, RANK = node rank (workerpool1[i] is i + 1).
            env["MASTER_ADDR"] = "127.0.0.1"
            env["MASTER_PORT"] = str(ports[0])
            env["WORLD_SIZE"] = str(len(training))
            env["RANK"] = str(index if pool == "workerpool0" else 1 + index)
    return env


ENV_CASES = {
    "1 replica": ([1], None),
    "2 replicas": ([1, 1], None),
    "4 replicas": ([1, 3], None),
    "HPT trial": ([1], 7),
    "HPT trial, 2 replicas": ([1, 1], 2),
    "ps and evaluator pools": ([1, 1, 1, 1], None),
}


@pytest.mark.parametrize("case", ENV_CASES, ids=list(ENV_CASES))
def test_replica_env_matches_the_contract_field_by_field(case):
    sizes, trial = ENV_CASES[case]
    ports = list(range(40000, 40000 + sum(sizes)))
    job = job_spec.make_job(sizes, BASE, args=["--a=1"], trial=trial, job_id=JOB_ID, ports=ports)
    assert len(job.replicas) == sum(sizes)
    metric_files = set()
    for pool, index in job.replicas:
        env = job_spec.replica_env(job, pool, index)
        want = expected_env(sizes, ports, pool, index, trial)
        name = f"{pool}-{index}"

        assert env["AIP_MODEL_DIR"] == want["AIP_MODEL_DIR"], name
        assert env["AIP_CHECKPOINT_DIR"] == want["AIP_CHECKPOINT_DIR"], name
        assert env["AIP_TENSORBOARD_LOG_DIR"] == want["AIP_TENSORBOARD_LOG_DIR"], name
        assert env["CLOUD_ML_JOB_ID"] == JOB_ID
        assert env["CLOUD_ML_PROJECT_ID"].isdigit()  # a project number, not a project id

        spec = json.loads(env["CLUSTER_SPEC"])
        assert isinstance(spec["job"], str), "real jobs send 'job' as a JSON-encoded string"
        assert json.loads(spec["job"])["job_args"] == ["--a=1"]
        assert {key: spec[key] for key in ("cluster", "environment", "task")} == want[
            "CLUSTER_SPEC"
        ], name

        if "TF_CONFIG" in want:
            tf_config = json.loads(env["TF_CONFIG"])
            assert tf_config["cluster"] == want["TF_CONFIG"]["cluster"], name
            assert "evaluator" not in tf_config["cluster"]
            assert tf_config["environment"] == "cloud"
            task = {k: v for k, v in tf_config["task"].items() if k != "cloud"}  # internal id
            assert task == want["TF_CONFIG"]["task"], name
        else:
            assert "TF_CONFIG" not in env, "Vertex sets no TF_CONFIG on single-replica jobs"

        for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
            assert env.get(key) == want.get(key), f"{name} {key}"

        metric_file = env["CLOUD_ML_HP_METRIC_FILE"]
        assert metric_file.startswith(job.run_dir + "/") and name in metric_file
        metric_files.add(metric_file)

        assert set(env) == set(want) | {"CLOUD_ML_PROJECT_ID", "CLOUD_ML_HP_METRIC_FILE"}
    assert len(metric_files) == len(job.replicas), "replicas must not share a metrics file"


@pytest.mark.parametrize("case", ENV_CASES, ids=list(ENV_CASES))
def test_trainer_runtime_reads_back_what_the_runner_sets(case):
    """The runner and vertex_trainer_runtime.runtime agree on each replica's role and dirs."""
    sizes, trial = ENV_CASES[case]
    job = job_spec.make_job(sizes, BASE, trial=trial, job_id=JOB_ID)
    for pool, index in job.replicas:
        env = job_spec.replica_env(job, pool, index)
        cluster = runtime.cluster_from_env(env)
        assert (cluster.pool, cluster.index) == (pool, index)
        assert cluster.trial == (str(trial) if trial else None)
        assert cluster.is_chief == (pool == "workerpool0" and index == 0)
        assert cluster.num_nodes == sizes[0] + (sizes[1] if len(sizes) > 1 else 0)
        if pool in ("workerpool0", "workerpool1"):
            assert str(cluster.node_rank) == env.get("RANK", "0")
        if "MASTER_PORT" in env:
            assert cluster.chief_address == (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
        dirs = runtime.resolve_output_dirs(environ=env)
        assert dirs.model_dir == runtime.join(job.run_dir, "model")
        assert dirs.checkpoint_dir == runtime.join(job.run_dir, "checkpoints")
        assert dirs.tensorboard_dir == runtime.join(job.run_dir, "logs")


def test_process_env_drops_stale_contract_variables_and_gives_each_replica_its_tmp():
    job = job_spec.make_job([1], BASE, job_id=JOB_ID)
    shell = {"PATH": "/bin", "TF_CONFIG": "{}", "RANK": "3", "AIP_MODEL_DIR": "gs://old/"}
    vertex = job_spec.environments(job, {"FOO": "bar", "CLOUD_ML_JOB_ID": "9"})["workerpool0-0"]
    env = launcher.process_env(vertex, "/tmp/x", base=shell)
    assert env["PATH"] == "/bin" and env["FOO"] == "bar" and env["TMPDIR"] == "/tmp/x"
    assert "TF_CONFIG" not in env and "RANK" not in env
    assert env["AIP_MODEL_DIR"] == f"{BASE}/model/"
    assert env["CLOUD_ML_JOB_ID"] == JOB_ID, "job.env never overrides what Vertex sets"


def test_replicas_sharing_the_machine_get_a_share_of_its_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    two = job_spec.environments(job_spec.make_job([2], BASE, job_id=JOB_ID))
    assert {env["OMP_NUM_THREADS"] for env in two.values()} == {"4"}
    one = job_spec.environments(job_spec.make_job([1], BASE, job_id=JOB_ID))
    assert "OMP_NUM_THREADS" not in one["workerpool0-0"], "one replica: the machine is its own"
    mine = job_spec.environments(job_spec.make_job([2], BASE), {"OMP_NUM_THREADS": "3"})
    assert {env["OMP_NUM_THREADS"] for env in mine.values()} == {"3"}, "job.env wins"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    shell = job_spec.environments(job_spec.make_job([2], BASE))
    assert all("OMP_NUM_THREADS" not in env for env in shell.values()), "the shell's value wins"
    # OpenMP threads that spin while waiting starve the other replica: they wait passively.
    assert {env["OMP_WAIT_POLICY"] for env in shell.values()} == {"passive"}
    assert "OMP_WAIT_POLICY" not in one["workerpool0-0"]
    active = job_spec.environments(job_spec.make_job([2], BASE), {"OMP_WAIT_POLICY": "active"})
    assert {env["OMP_WAIT_POLICY"] for env in active.values()} == {"active"}, "job.env wins"


def test_cpu_slices_are_disjoint_and_cover_the_machine():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    cpus = os.sched_getaffinity(0)
    assert launcher.cpu_slices(1) == [None]
    assert launcher.cpu_slices(len(cpus) + 1) == [None] * (len(cpus) + 1)
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs to split")
    first, second = launcher.cpu_slices(2)
    assert first and second and not first & second and first | second == cpus


def test_free_ports_are_distinct_and_bindable():
    import socket

    ports = job_spec.free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("configured", "replicas", "sizes"),
    [([1], None, [1]), ([1, 3], None, [1, 3]), ([1, 0], None, [1]), ([1], 4, [1, 3])],
)
def test_pool_sizes(configured, replicas, sizes):
    assert job_spec.pool_sizes(configured, replicas) == sizes


def test_pool_sizes_rejects_bad_counts():
    with pytest.raises(ValueError):
        job_spec.pool_sizes([1], 0)
    with pytest.raises(ValueError):
        job_spec.pool_sizes([2])


def test_trial_values_are_reproducible_in_range_and_formatted_like_vertex():
    parameters = [
        config.Parameter("learning_rate", "double", min=1e-4, max=1e-1, scale="log"),
        config.Parameter("depth", "integer", min=3, max=10),
        config.Parameter("batch_size", "discrete", values=(16, 32, 64)),
        config.Parameter("activation", "categorical", values=("relu", "tanh")),
    ]
    for trial in range(1, 30):
        values = job_spec.trial_values(parameters, trial)
        assert values == job_spec.trial_values(parameters, trial)
        assert 1e-4 <= float(values["learning_rate"]) <= 1e-1
        assert 3 <= int(values["depth"]) <= 10
        assert values["batch_size"] in ("16.0", "32.0", "64.0")  # DISCRETE arrives as a float
        assert values["activation"] in ("relu", "tanh")
    assert job_spec.trial_values(parameters, 1, {"depth": "4"})["depth"] == "4"
    with pytest.raises(ValueError):
        job_spec.trial_values(parameters, 1, {"nope": "1"})


def test_hpt_trial_args_come_last_as_name_equals_value(tmp_path):
    study = config.load(PROJECT / "vertex.yaml").hpt
    args = tools_cli.parse(
        ["local-run", "--hpt-trial=2", f"--output-dir={tmp_path}", "--job-id=5", "--", "--seed=7"]
    )
    job, _, _ = cli.build(args)
    trial_args = job.args[-len(study.parameters) :]
    assert [arg.split("=")[0] for arg in trial_args] == [f"--{p.id}" for p in study.parameters]
    assert "--seed=7" in job.args[: -len(study.parameters)]
    assert job.trial == "2" and job.run_dir == f"{tmp_path}/2"
    env = job_spec.replica_env(job, "workerpool0", 0)
    assert env["AIP_MODEL_DIR"] == f"{tmp_path}/2/model/"
    assert json.loads(env["CLUSTER_SPEC"])["task"]["trial"] == "2"


def test_last_measurement_reads_the_hypertune_file(tmp_path):
    path = tmp_path / "output.metrics"
    assert cli.last_measurement(str(path)) == ""
    lines = [
        {"auc": "0.9", "checkpoint_path": "", "global_step": "10", "timestamp": 1.0, "trial": "0"},
        {"auc": "0.95", "checkpoint_path": "", "global_step": "20", "timestamp": 2.0, "trial": "0"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.last_measurement(str(path)) == f"auc=0.95 at step 20 ({path})"


def test_print_env_shows_every_replica(tmp_path, capsys):
    argv = ["--replicas=2", f"--output-dir={tmp_path}", "--print-env"]
    assert tools_cli.main(["local-run", *argv]) == 0
    out = capsys.readouterr().out
    assert "workerpool0-0:" in out and "workerpool1-0:" in out and "TF_CONFIG=" in out
    assert not os.listdir(tmp_path), "--print-env runs nothing"
