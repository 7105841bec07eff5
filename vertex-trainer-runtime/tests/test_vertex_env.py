"""The writer side of Vertex's contract (``vertex_env``: what the tools' emulator sets on a
replica) against Vertex's documented examples, read back by the reader side (``runtime``,
``tracking``): one package, so the two sides share their names and only their shapes are
tested here."""

from __future__ import annotations

import json

import pytest

from vertex_trainer_runtime import runtime, tracking, vertex_env


def test_the_trainer_reads_the_experiment_run_the_tools_name():
    env = vertex_env.experiment_env("my-project", "europe-west4", "my-runs", "job-20260101-000000")
    assert set(env) == {"AIP_EXPERIMENT_NAME", "AIP_EXPERIMENT_RUN_NAME"}
    names = ("my-project", "europe-west4", "my-runs", "job-20260101-000000")
    assert tracking.parse_names(env) == names


class TestReplicaEnvironment:
    """What vertex_env.replica_environment writes, against the documented
    examples written out by hand (Vertex docs: CLUSTER_SPEC, TF_CONFIG, AIP_* output dirs),
    and read back by the readers."""

    BASE = "gs://bucket/hpt-job"
    POOLS = {
        "workerpool0": ["training-workerpool0-abc-0:2222"],
        "workerpool1": ["training-workerpool1-abc-0:2222", "training-workerpool1-abc-1:2222"],
        "workerpool2": ["training-workerpool2-abc-0:2222"],
    }
    JOB = {"python_module": "", "package_uris": [], "job_args": ["--epochs=3"]}

    def write(self, pool, index, pools=None, trial="1"):
        return vertex_env.replica_environment(
            pools or self.POOLS,
            pool,
            index,
            base_output_dir=self.BASE + "/",
            job_id="8765",
            project_number="123456789012",
            trial=trial,
            job_args=["--epochs=3"],
        )

    def test_worker_0_of_hpt_trial_1_matches_the_documented_example(self):
        env = self.write("workerpool1", 0)
        assert env["AIP_MODEL_DIR"] == "gs://bucket/hpt-job/1/model/"
        assert env["AIP_CHECKPOINT_DIR"] == "gs://bucket/hpt-job/1/checkpoints/"
        assert env["AIP_TENSORBOARD_LOG_DIR"] == "gs://bucket/hpt-job/1/logs/"
        assert env["CLOUD_ML_PROJECT_ID"] == "123456789012"
        assert env["CLOUD_ML_JOB_ID"] == "8765"
        spec = json.loads(env["CLUSTER_SPEC"])
        assert spec["cluster"] == self.POOLS
        assert spec["environment"] == "cloud"
        assert spec["task"] == {"type": "workerpool1", "index": 0, "trial": "1"}
        assert json.loads(spec["job"]) == self.JOB, "real jobs send 'job' as a JSON string"
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["cluster"] == {
            "chief": ["training-workerpool0-abc-0:2222"],
            "ps": ["training-workerpool2-abc-0:2222"],
            "worker": ["training-workerpool1-abc-0:2222", "training-workerpool1-abc-1:2222"],
        }
        assert tf_config["environment"] == "cloud" and tf_config["job"] == self.JOB
        assert tf_config["task"]["cloud"]  # an internal id code must ignore
        del tf_config["task"]["cloud"]
        assert tf_config["task"] == {"type": "worker", "index": 0, "trial": "1"}
        # As observed on multi-node jobs: node count and node rank; pool 2 is not a node.
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("training-workerpool0-abc-0", "2222")
        assert (env["WORLD_SIZE"], env["RANK"]) == ("3", "1")
        assert set(env) == {
            "AIP_MODEL_DIR",
            "AIP_CHECKPOINT_DIR",
            "AIP_TENSORBOARD_LOG_DIR",
            "CLOUD_ML_PROJECT_ID",
            "CLOUD_ML_JOB_ID",
            "CLUSTER_SPEC",
            "TF_CONFIG",
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
        }

    def test_single_replica_job_gets_no_tf_config_and_no_trial_level(self):
        env = self.write("workerpool0", 0, pools={"workerpool0": ["cmle-x-0:2222"]}, trial=None)
        assert env["AIP_MODEL_DIR"] == "gs://bucket/hpt-job/model/"
        assert json.loads(env["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}
        assert not {"TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"} & set(env)

    def test_evaluators_are_a_task_type_never_a_tf_config_cluster_key(self):
        pools = {**self.POOLS, "workerpool3": ["training-workerpool3-abc-0:2222"]}
        env = self.write("workerpool3", 0, pools=pools)
        tf_config = json.loads(env["TF_CONFIG"])
        assert set(tf_config["cluster"]) == {"chief", "worker", "ps"}
        assert tf_config["task"]["type"] == "evaluator"
        assert "RANK" not in env, "an evaluator is not a member of the training group"

    @pytest.mark.parametrize(
        "pool, index",
        [("workerpool0", 0), ("workerpool1", 0), ("workerpool1", 1), ("workerpool2", 0)],
    )
    def test_the_readers_read_back_what_the_writer_writes(self, pool, index):
        env = self.write(pool, index)
        cluster = runtime.cluster_from_env(env)
        assert (cluster.pool, cluster.index, cluster.trial) == (pool, index, "1")
        assert cluster.pools == self.POOLS and cluster.num_nodes == 3
        assert runtime.resolve_output_dirs(environ=env) == runtime.OutputDirs(
            "gs://bucket/hpt-job/1/model",
            "gs://bucket/hpt-job/1/checkpoints",
            "gs://bucket/hpt-job/1/logs",
        )

    @pytest.mark.parametrize("pool, index", [("workerpool1", 2), ("workerpool3", 0), ("x", 0)])
    def test_a_replica_outside_the_job_is_an_error(self, pool, index):
        with pytest.raises(ValueError, match="is not a replica of the job"):
            self.write(pool, index)
