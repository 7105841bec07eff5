"""XGBoost's collective across replicas (``vertex_trainer_runtime.xgboost.distributed``): one
replica needs none; two processes with Vertex-shaped ``CLUSTER_SPEC``s join as their node ranks
and exchange objects through it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("xgboost")

from vertex_trainer_runtime import runtime  # noqa: E402
from vertex_trainer_runtime.xgboost import distributed  # noqa: E402

REPLICA = """
import json, sys
from vertex_trainer_runtime import runtime
from vertex_trainer_runtime.xgboost import distributed

cluster = runtime.Cluster(sys.argv[1], 0, json.loads(sys.argv[2]))
with distributed.group(cluster) as group:
    gathered = group.allgather({"rank": group.rank, "pool": cluster.pool})
    shared = group.broadcast(None if group.rank else ["the chief's"])
print(json.dumps([group.rank, group.world, gathered, shared]))
"""


def test_one_replica_joins_no_collective():
    with distributed.group(runtime.Cluster()) as group:
        assert (group.rank, group.world, group.distributed) == (0, 1, False)
        assert group.broadcast("x") == "x" and group.allgather(3) == [3]


def test_two_replicas_join_as_their_node_ranks_and_exchange_objects(tmp_path):
    # XGBoost imports scikit-learn whenever it is installed (seconds per process under load);
    # a replica has none, so these processes find a stand-in that fails to import.
    (tmp_path / "sklearn").mkdir()
    (tmp_path / "sklearn" / "__init__.py").write_text("raise ImportError('not on a replica')")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pools = {"workerpool0": [f"127.0.0.1:{port}"], "workerpool1": ["127.0.0.1:1"]}
    replicas = [
        subprocess.Popen(
            [sys.executable, "-c", REPLICA, pool, json.dumps(pools)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for pool in ("workerpool0", "workerpool1")
    ]
    results = []
    for replica in replicas:
        stdout, stderr = replica.communicate(timeout=120)
        assert replica.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    gathered = [{"rank": 0, "pool": "workerpool0"}, {"rank": 1, "pool": "workerpool1"}]
    assert results == [[0, 2, gathered, ["the chief's"]], [1, 2, gathered, ["the chief's"]]]
