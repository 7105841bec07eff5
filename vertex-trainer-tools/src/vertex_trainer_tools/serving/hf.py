"""A ``save_pretrained`` folder served by ``hf-serve``, as Google's Hugging Face PyTorch inference
container serves it on Vertex.

That container (Deep Learning Containers ``huggingface-pytorch-inference-*``, transformers 5)
runs ``hf-serve`` from its entrypoint with Vertex's variables: ``AIP_MODE=PREDICTION`` switches it
to Vertex's schema (``{"instances": [...], "parameters": {...}}`` ->
``{"predictions": [...]}``, one pipeline call per instance), ``AIP_HTTP_PORT``,
``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE`` set the port and routes, and the model folder
(downloaded from ``AIP_STORAGE_URI``) becomes ``MODEL_DIR``; ``HF_TASK=text-classification``
picks the pipeline. For text classification each prediction is ``[{"label": ..., "score": ...}]``
(the top class; ``"parameters": {"top_k": 2}`` gives more).

Here the same server starts with the project's Python (its torch and transformers) on a free
loopback port, answers one request and stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.local_run.job import free_ports
from vertex_trainer_tools.serving import envs

TASK = "text-classification"
PREDICT_ROUTE = "/predict"
HEALTH_ROUTE = "/health"
START_TIMEOUT_S = 300


def server_env(model_dir: str | Path, port: int, pythonpath: Path) -> dict[str, str]:
    """The variables Vertex and the container's entrypoint give ``hf-serve``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIP_")}
    env.update(
        AIP_MODE="PREDICTION",
        AIP_HTTP_PORT=str(port),
        AIP_PREDICT_ROUTE=PREDICT_ROUTE,
        AIP_HEALTH_ROUTE=HEALTH_ROUTE,
        HF_TASK=TASK,
        # what the entrypoint exports once the model is on local disk
        PORT=str(port),
        CLOUD="google",
        MODEL_DIR=str(Path(model_dir).resolve()),
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(
            [str(pythonpath), str(pythonpath / "stack"), env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep),
    )
    return env


def _call(url: str, body: bytes | None = None, timeout: float = 120) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def predict(model_dir: str | Path, body: dict[str, Any], python: str = sys.executable) -> dict:
    pythonpath = envs.hf_serve_path(python)
    (port,) = free_ports(1)
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(
            [python, "-c", "from hf_serve.cli import main; main()"],
            env=server_env(model_dir, port, pythonpath),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if server.poll() is not None:
                    log.seek(0)
                    lines = log.read().strip().splitlines() or [f"exit {server.returncode}"]
                    raise ToolError(f"{model_dir}: hf-serve stopped: {lines[-1]}")
                try:
                    if _call(base + HEALTH_ROUTE, timeout=2)[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise ToolError(f"{model_dir}: hf-serve not ready in {START_TIMEOUT_S} s")
                time.sleep(0.5)
            status, answer = _call(base + PREDICT_ROUTE, json.dumps(body).encode())
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    if status != 200:
        raise ToolError(f"{model_dir}: hf-serve answered {status}: {answer.decode()[:300]}")
    try:
        return json.loads(answer)
    except ValueError:
        raise ToolError(f"{model_dir}: hf-serve answered no JSON: {answer[:300]!r}") from None
