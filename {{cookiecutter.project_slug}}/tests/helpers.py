"""Helpers the tests of every framework share: the hypertune file, ports, processes, CLUSTER_SPEC.

Tests import it as ``helpers``: pytest puts this folder on ``sys.path`` for ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

# What Vertex sets on a replica; a test's trainer must not inherit them from the caller's shell.
VERTEX_PREFIXES = ("AIP_", "CLOUD_ML_", "CLUSTER_SPEC", "TF_CONFIG")


def is_vertex_variable(name: str) -> bool:
    return name.startswith(VERTEX_PREFIXES)


def without_vertex(**extra: str) -> dict[str, str]:
    """This process's environment less the caller's Vertex variables, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not is_vertex_variable(name)}
    env.update(extra)
    return env


def read_metrics(path: str | Path) -> list[dict]:
    """The measurements cloudml-hypertune wrote, oldest first ([] when there is no file)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open until each one is known)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (started with ``start_new_session=True``), like a
    preempted VM: torchrun workers and TensorFlow tasks waiting for a peer go too."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def cluster_spec(
    pools: dict[str, list[str]], pool: str, index: int = 0, trial: str | None = "", **extra
) -> str:
    """``CLUSTER_SPEC`` as Vertex sets it: ``job`` is a JSON string, ``trial`` may be empty
    (``None``: no ``trial`` key); ``extra`` adds top-level keys a trainer must ignore."""
    task = {"type": pool, "index": index}
    if trial is not None:
        task["trial"] = trial
    spec = {
        "cluster": pools,
        "environment": "cloud",
        "task": task,
        "job": json.dumps({"python_module": "", "package_uris": [], "job_args": []}),
        **extra,
    }
    return json.dumps(spec)
