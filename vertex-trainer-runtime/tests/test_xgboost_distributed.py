"""XGBoost's collective across replicas (``vertex_trainer_runtime.xgboost.distributed``): one
replica needs none; two processes with Vertex-shaped ``CLUSTER_SPEC``s join as their node ranks
and exchange objects through it; a worker whose chief stops answering exits within the grace."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("xgboost")

from vertex_trainer_runtime import runtime  # noqa: E402
from vertex_trainer_runtime.xgboost import distributed  # noqa: E402

REPLICA = """
import json, sys, time
import numpy as np
import xgboost as xgb
from vertex_trainer_runtime import runtime
from vertex_trainer_runtime.xgboost import distributed


class Slow(xgb.callback.TrainingCallback):
    def after_iteration(self, model, epoch, evals_log):
        print(f"round {epoch + 1}", flush=True)
        time.sleep(0.1)
        return False


cluster = runtime.Cluster(sys.argv[1], 0, json.loads(sys.argv[2]))
with distributed.group(cluster) as group:
    gathered = group.allgather({"rank": group.rank, "pool": cluster.pool})
    shared = group.broadcast(None if group.rank else ["the chief's"])
    print("result", json.dumps([group.rank, group.world, gathered, shared]), flush=True)
    if sys.argv[3] == "train":  # rounds of all-reduced histograms until the process is stopped
        rows = np.random.default_rng(group.rank).normal(size=(200, 4))
        data = xgb.DMatrix(rows, label=rows[:, 0] > 0)
        xgb.train({"nthread": 1}, data, 10**6, callbacks=[Slow()])
"""


def start_replicas(tmp_path, then: str) -> dict[str, subprocess.Popen]:
    """A chief and a worker running ``REPLICA`` (``then``: "exit" or "train"), each printing to
    ``tmp_path/<pool>.log``."""
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
    replicas = {}
    for pool in pools:
        with open(tmp_path / f"{pool}.log", "w") as log:
            command = [sys.executable, "-c", REPLICA, pool, json.dumps(pools), then]
            replicas[pool] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env
            )
    return replicas


def test_one_replica_joins_no_collective():
    with distributed.group(runtime.Cluster()) as group:
        assert (group.rank, group.world, group.distributed) == (0, 1, False)
        assert group.broadcast("x") == "x" and group.allgather(3) == [3]


def test_two_replicas_join_as_their_node_ranks_and_exchange_objects(tmp_path):
    results = []
    for pool, replica in start_replicas(tmp_path, "exit").items():
        replica.wait(timeout=120)
        lines = (tmp_path / f"{pool}.log").read_text().splitlines()
        assert replica.returncode == 0, "\n".join(lines[-40:])
        results.append(json.loads(next(x[7:] for x in lines if x.startswith("result "))))
    gathered = [{"rank": 0, "pool": "workerpool0"}, {"rank": 1, "pool": "workerpool1"}]
    assert results == [[0, 2, gathered, ["the chief's"]], [1, 2, gathered, ["the chief's"]]]


def test_a_worker_whose_chief_stopped_answering_exits_within_the_grace_period(tmp_path):
    """The chief's VM gone without a TCP reset (here: the chief frozen by SIGSTOP mid-training):
    the worker's next collective call times out (``COLLECTIVE_TIMEOUT_S``), so it exits,
    non-zero, within Compute Engine's 30 s grace instead of waiting on for minutes; Vertex then
    reruns it (without restart_job_on_worker_restart) or the whole job (with it)."""
    replicas = start_replicas(tmp_path, "train")
    chief, worker = replicas["workerpool0"], replicas["workerpool1"]
    chief_log = tmp_path / "workerpool0.log"
    try:
        deadline = time.monotonic() + 120
        while "round 3\n" not in chief_log.read_text():
            assert chief.poll() is None and worker.poll() is None, chief_log.read_text()
            assert time.monotonic() < deadline, "no round trained in time"
            time.sleep(0.05)
        chief.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            worker.wait(timeout=distributed.COLLECTIVE_TIMEOUT_S + 40)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker outlived its frozen chief by more than a minute")
        seconds = time.monotonic() - frozen
    finally:
        for replica in (worker, chief):
            replica.kill()
            replica.wait()
    log = (tmp_path / "workerpool1.log").read_text()
    print(f"worker exited {worker.returncode} {seconds:.1f} s after its chief froze")
    assert worker.returncode not in (0, None), log[-3000:]
    assert seconds < 30, log[-3000:]
