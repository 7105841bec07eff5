"""vertex_trainer_runtime.torch.distributed: the replica's plan from CLUSTER_SPEC, a worker that
fails or loses its chief ends at once, and the launcher forwards SIGTERM to its workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from vertex_trainer_runtime import runtime  # noqa: E402
from vertex_trainer_runtime.torch import distributed  # noqa: E402


def test_plan_from_cluster_spec():
    spec = {
        "cluster": {
            "workerpool0": ["127.0.0.1:2222"],
            "workerpool1": ["127.0.0.1:2223"],
            "workerpool2": ["reduction-server:2222"],  # never a rank
        },
        "task": {"type": "workerpool1", "index": 0},
    }
    cluster = runtime.cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)})
    plan = distributed.plan(cluster, nproc_per_node=0)
    assert (plan.nnodes, plan.node_rank, plan.master) == (2, 1, ("127.0.0.1", 2222))
    assert plan.nproc_per_node >= 1 and plan.world_size == 2 * plan.nproc_per_node


def test_workers_get_the_command_line_as_given_then_the_extra_flags():
    """Rebuilt from parsed values, ``--no-group-by-length`` would be lost: the words as given."""
    given = ["--no-group-by-length", "--model_name_or_path", "scratch"]
    argv = distributed.worker_argv(["--local-dir=/node"], given)
    assert argv == [*given, "--local-dir=/node"]


def test_the_agents_rendezvous_is_handed_to_the_workers_as_a_wait(tmp_path, monkeypatch):
    """torchrun's agent meets the other replicas before its workers exist: the launcher puts
    the time that took in the environment its workers inherit, for their job ledger."""
    from torch.distributed.elastic.agent.server import api as agent

    from vertex_trainer_runtime import ledger

    ledger.open_for(str(tmp_path), runtime.Cluster(), {ledger.SECONDS_ENV: "3600"})
    monkeypatch.delenv(ledger.WAITED_ENV, raising=False)
    met = []
    monkeypatch.setattr(agent.SimpleElasticAgent, "_rendezvous", lambda *a: met.append(a) or 7)
    with distributed._timed_rendezvous():
        began = time.time()
        assert agent.SimpleElasticAgent._rendezvous("agent", "group") == 7
        waited = [float(t) for t in os.environ[ledger.WAITED_ENV].split()]
    assert met == [("agent", "group")]
    assert began <= waited[0] <= waited[1] <= time.time()
    assert agent.SimpleElasticAgent._rendezvous("agent", "again") == 7, "restored afterwards"
    assert len(met) == 2
    ledger.close(2)
    os.environ.pop(ledger.WAITED_ENV)  # set by the launcher's code, not by monkeypatch


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        ("RuntimeError('Connection reset by peer')", 1, "RuntimeError: Connection reset by peer"),
        ("cli.InputError('--train-data: no such file')", 2, "ERROR: --train-data: no such file"),
    ],
)
def test_a_failing_torchrun_worker_ends_at_once_with_its_reason(raised, code, said):
    """No Python teardown after a failure (it can hang on the process group): the exit code and
    the reason, with the traceback for anything but bad input."""
    program = (
        "from vertex_trainer_runtime import cli\n"
        "from vertex_trainer_runtime.torch import distributed\n"
        "def train():\n"
        f"    raise {raised}\n"
        "distributed.run_worker(train)\n"
        "print('not reached')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == code, result.stderr
    assert said in result.stderr
    assert ("Traceback" in result.stderr) == (code == 1)
    assert "not reached" not in result.stdout


def test_the_launcher_forwards_sigterm_to_its_workers_and_nothing_more():
    others = []
    forward = distributed._ForwardSigterm(lambda signum, frame: others.append(signum))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in distributed._children()
        assert forward(signal.SIGTERM, None) is None  # no exception: torchrun keeps watching
        assert child.wait(timeout=30) == -signal.SIGTERM
        forward(signal.SIGINT, None)
        assert others == [signal.SIGINT] and forward.forwarded == 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


STORE = """
import time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
time.sleep(600)
"""

WATCH = """
import logging, sys, time
from vertex_trainer_runtime.torch import distributed
logging.basicConfig(level=logging.INFO)
address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": sys.argv[1]}
distributed.watch_chief({**address, "TORCHELASTIC_USE_AGENT_STORE": "True"})
print("watching", flush=True)
time.sleep(300)
print("still running", flush=True)
"""


def test_a_worker_exits_once_the_chiefs_store_stops_answering(tmp_path):
    """The chief's VM vanishes without closing its connections (here: its store process is
    stopped): the worker's watch sees no answer and ends the worker, well within 30 s."""
    store = subprocess.Popen([sys.executable, "-c", STORE], stdout=subprocess.PIPE)
    worker = None
    log_path = tmp_path / "worker.log"
    try:
        port = store.stdout.readline().decode().strip()
        with open(log_path, "wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-c", WATCH, port], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while b"watching" not in log_path.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        time.sleep(distributed.CHIEF_CHECK_SECONDS)  # at least one answered check
        assert worker.poll() is None, log_path.read_text()
        store.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        code = worker.wait(timeout=120)
        seconds = time.monotonic() - stopped
        output = log_path.read_text()
        print(f"pytorch worker without an answering chief: exit {code} {seconds:.1f} s later")
        assert code == 1 and "the chief is gone" in output, output
        limit = distributed.CHIEF_CHECK_SECONDS + distributed.CHIEF_TIMEOUT_SECONDS
        assert seconds < min(30, limit + 5), output
    finally:
        for process in (worker, store):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
