"""The reader side of the Vertex contract, ``vertex_trainer_runtime.runtime`` (every variant's),
against values shaped like real jobs send them."""

from __future__ import annotations

import json

import pytest

from vertex_trainer_runtime import runtime

# As observed in real jobs: `job` is a JSON-encoded string and extra keys such as open_ports appear.
JOB_AS_STRING = json.dumps({"python_module": "", "package_uris": [], "job_args": []})
HOSTS = {
    "workerpool0": ["cmle-training-workerpool0-ab12cd34ef-0:2222"],
    "workerpool1": [
        "cmle-training-workerpool1-ab12cd34ef-0:2222",
        "cmle-training-workerpool1-ab12cd34ef-1:2222",
    ],
    "workerpool2": ["cmle-training-workerpool2-ab12cd34ef-0:2222"],
}


def cluster_spec(pool: str, index: int, trial=None, pools=None, **extra) -> str:
    task = {"type": pool, "index": index}
    if trial is not None:
        task["trial"] = trial
    spec = {
        "cluster": pools or HOSTS,
        "environment": "cloud",
        "task": task,
        "job": JOB_AS_STRING,
        **extra,
    }
    return json.dumps(spec)


class TestOutputDirs:
    def test_local_default(self):
        dirs = runtime.resolve_output_dirs(environ={})
        assert dirs == runtime.OutputDirs("outputs/model", "outputs/checkpoints", "outputs/logs")

    def test_job_dir_subfolders(self):
        dirs = runtime.resolve_output_dirs(job_dir="gs://bucket/run-1/", environ={})
        assert dirs.model_dir == "gs://bucket/run-1/model"
        assert dirs.checkpoint_dir == "gs://bucket/run-1/checkpoints"
        assert dirs.tensorboard_dir == "gs://bucket/run-1/logs"

    def test_vertex_variables_beat_job_dir_and_lose_their_trailing_slash(self):
        environ = {
            "AIP_MODEL_DIR": "gs://bucket/base/7/model/",
            "AIP_CHECKPOINT_DIR": "gs://bucket/base/7/checkpoints/",
            "AIP_TENSORBOARD_LOG_DIR": "gs://bucket/base/7/logs/",
        }
        dirs = runtime.resolve_output_dirs(job_dir="/tmp/job", environ=environ)
        assert dirs == runtime.OutputDirs(
            "gs://bucket/base/7/model",
            "gs://bucket/base/7/checkpoints",
            "gs://bucket/base/7/logs",
        )

    def test_flags_beat_vertex_variables(self):
        environ = {"AIP_MODEL_DIR": "gs://bucket/model/", "AIP_CHECKPOINT_DIR": "gs://b/c/"}
        dirs = runtime.resolve_output_dirs(
            model_dir="/gcs/bucket/exported/", tensorboard_dir="local/tb", environ=environ
        )
        assert dirs.model_dir == "/gcs/bucket/exported"
        assert dirs.checkpoint_dir == "gs://b/c"
        assert dirs.tensorboard_dir == "local/tb"

    def test_empty_variables_are_ignored(self):
        dirs = runtime.resolve_output_dirs(environ={"AIP_MODEL_DIR": ""}, job_dir="j")
        assert dirs.model_dir == "j/model"


class TestPaths:
    @pytest.mark.parametrize(
        "uri, fuse",
        [
            ("gs://bucket/a/b", "/gcs/bucket/a/b"),
            ("gs://bucket", "/gcs/bucket"),
            ("/local/path", "/local/path"),
            ("relative/path", "relative/path"),
        ],
    )
    def test_fuse_mapping_round_trips(self, uri, fuse):
        assert runtime.to_fuse_path(uri) == fuse
        assert runtime.to_gcs_uri(fuse) == (uri if uri.startswith("gs://") else fuse)

    @pytest.mark.parametrize(
        "base, expected",
        [
            ("gs://bucket/run/", "gs://bucket/run/model/v1"),
            ("gs://bucket/run", "gs://bucket/run/model/v1"),
            ("/gcs/bucket/run//", "/gcs/bucket/run/model/v1"),
            ("/", "/model/v1"),
        ],
    )
    def test_join(self, base, expected):
        assert runtime.join(base, "model", "/v1/") == expected

    def test_local_path_passes_local_paths_through(self, tmp_path):
        assert runtime.local_path(str(tmp_path)) == str(tmp_path)

    def test_local_path_without_the_fuse_mount_says_what_to_do(self):
        with pytest.raises(RuntimeError, match="FUSE mount /gcs/no-such-bucket-x"):
            runtime.local_path("gs://no-such-bucket-x/data.csv")


class TestClusterSpec:
    def test_no_variables_means_a_single_local_chief(self):
        cluster = runtime.cluster_from_env({})
        assert cluster.is_chief and not cluster.is_distributed
        assert cluster.task_type == "chief"
        assert cluster.num_nodes == 1 and cluster.node_rank == 0
        assert cluster.trial is None

    def test_single_replica_job(self):
        spec = cluster_spec("workerpool0", 0, pools={"workerpool0": ["cmle-x-0:2222"]})
        cluster = runtime.cluster_from_env({"CLUSTER_SPEC": spec})
        assert cluster.is_chief and not cluster.is_distributed
        assert cluster.chief_address == ("cmle-x-0", 2222)

    @pytest.mark.parametrize(
        "pool, index, task_type, rank, chief",
        [
            ("workerpool0", 0, "chief", 0, True),
            ("workerpool1", 0, "worker", 1, False),
            ("workerpool1", 1, "worker", 2, False),
        ],
    )
    def test_roles_and_ranks(self, pool, index, task_type, rank, chief):
        cluster = runtime.cluster_from_env({"CLUSTER_SPEC": cluster_spec(pool, index)})
        assert cluster.task_type == task_type
        assert cluster.node_rank == rank
        assert cluster.is_chief is chief
        # Pool 2 (parameter servers / Reduction Server) is not a training node.
        assert cluster.num_nodes == 3
        assert cluster.training_hosts[0] == HOSTS["workerpool0"][0]
        assert cluster.chief_address == ("cmle-training-workerpool0-ab12cd34ef-0", 2222)

    def test_reduction_server_replica_is_not_a_rank(self):
        cluster = runtime.cluster_from_env({"CLUSTER_SPEC": cluster_spec("workerpool2", 0)})
        assert cluster.task_type == "ps" and not cluster.is_chief
        with pytest.raises(runtime.ClusterSpecError):
            _ = cluster.node_rank

    @pytest.mark.parametrize("trial, expected", [("3", "3"), ("", None), (None, None), (4, "4")])
    def test_trial_missing_empty_or_set(self, trial, expected):
        spec = cluster_spec("workerpool0", 0, trial=trial)
        assert runtime.cluster_from_env({"CLUSTER_SPEC": spec}).trial == expected

    def test_job_as_object_and_extra_keys_are_ignored(self):
        spec = json.loads(cluster_spec("workerpool1", 1, open_ports=[3333]))
        spec["job"] = {"worker_pool_specs": []}
        spec["future_key"] = {"anything": True}
        cluster = runtime.cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)})
        assert (cluster.pool, cluster.index) == ("workerpool1", 1)

    @pytest.mark.parametrize(
        "raw, message",
        [
            ("not json", "CLUSTER_SPEC is not valid JSON"),
            ("[1, 2]", "CLUSTER_SPEC must be a JSON object"),
            ('{"cluster": {}, "task": {"type": "workerpool9"}}', "workerpool9"),
        ],
    )
    def test_malformed_cluster_spec_is_a_clear_error(self, raw, message):
        with pytest.raises(runtime.ClusterSpecError, match=message):
            runtime.cluster_from_env({"CLUSTER_SPEC": raw})


class TestTfConfig:
    # The documented example: HPT trial 1, chief + 2 workers + 1 ps, seen from worker 0.
    TF_CONFIG = {
        "cluster": {
            "chief": ["training-workerpool0-abc-0:2222"],
            "ps": ["training-workerpool2-abc-0:2222"],
            "worker": ["training-workerpool1-abc-0:2222", "training-workerpool1-abc-1:2222"],
        },
        "environment": "cloud",
        "job": {"python_module": "trainer.task"},
        "task": {"cloud": "internal-id", "index": 0, "trial": "1", "type": "worker"},
    }

    def test_tf_config_alone(self):
        cluster = runtime.cluster_from_env({"TF_CONFIG": json.dumps(self.TF_CONFIG)})
        assert (cluster.pool, cluster.index, cluster.task_type) == ("workerpool1", 0, "worker")
        assert cluster.trial == "1"
        assert cluster.num_nodes == 3 and cluster.node_rank == 1
        assert cluster.tf_config["task"]["type"] == "worker"

    def test_cluster_spec_wins_and_tf_config_is_kept(self):
        environ = {
            "CLUSTER_SPEC": cluster_spec("workerpool1", 0),
            "TF_CONFIG": json.dumps(self.TF_CONFIG),
        }
        cluster = runtime.cluster_from_env(environ)
        assert cluster.pool == "workerpool1" and cluster.trial == "1"
        assert cluster.tf_config == self.TF_CONFIG

    def test_evaluator_and_legacy_master(self):
        evaluator = {
            "cluster": self.TF_CONFIG["cluster"],
            "task": {"type": "evaluator", "index": 0},
        }
        assert runtime.cluster_from_env({"TF_CONFIG": json.dumps(evaluator)}).pool == "workerpool3"
        master = {"cluster": {"master": ["m:2222"]}, "task": {"type": "master", "index": 0}}
        assert runtime.cluster_from_env({"TF_CONFIG": json.dumps(master)}).is_chief

    def test_reducers_are_pool_2_and_left_out_of_tensorflows_cluster(self):
        # A job with job.reduction_server: Vertex lists pool 2 as "ps" in TF_CONFIG.
        environ = {
            "CLUSTER_SPEC": cluster_spec("workerpool1", 0),
            "TF_CONFIG": json.dumps(self.TF_CONFIG),
        }
        cluster = runtime.cluster_from_env(environ)
        assert cluster.reducers == HOSTS["workerpool2"]
        assert cluster.num_nodes == 3 and cluster.node_rank == 1  # the reducers are no rank
        config = runtime.training_tf_config(cluster.tf_config)
        assert config["cluster"] == {
            "chief": self.TF_CONFIG["cluster"]["chief"],
            "worker": self.TF_CONFIG["cluster"]["worker"],
        }
        # The task, trial, job and unknown keys stay as Vertex set them; the input is unchanged.
        assert {k: v for k, v in config.items() if k != "cluster"} == {
            k: v for k, v in self.TF_CONFIG.items() if k != "cluster"
        }
        assert "ps" in cluster.tf_config["cluster"]

    def test_no_reducers_leaves_tf_config_as_it_is(self):
        pools = {name: hosts for name, hosts in HOSTS.items() if name != "workerpool2"}
        cluster = runtime.cluster_from_env(
            {"CLUSTER_SPEC": cluster_spec("workerpool0", 0, pools=pools)}
        )
        assert cluster.reducers == []
        config = {"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "chief"}}
        assert runtime.training_tf_config(config) == config
