"""Cached installs of what a serving container has and the project's environment has not.

Made once per machine under ``$VERTEX_TOOLS_CACHE`` (default ``~/.cache/vertex-trainer-tools``),
in a temporary folder renamed into place when complete, under a file lock: parallel tests and
users share one copy, and an interrupted install leaves nothing half-made behind.

- ``xgboost-cpu==2.1.4`` in a virtual environment of its own: the 2.1 release line of Vertex's
  prebuilt ``xgboost-cpu.2-1`` prediction image (the project trains with xgboost 3.2, whose
  ``model.bst`` that image must load: see the ``base_score`` note in requirements.txt).
- ``hf-serve==0.1.1`` (the serving library of the Hugging Face PyTorch inference container for
  transformers 5) plus its web stack, in a folder put first on ``PYTHONPATH`` of the project's
  Python: torch and transformers stay the project's own, and hf-serve's optional heavy extras
  (diffusers, sentence-transformers, torchvision, torchcodec) are never installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vertex_trainer_tools.errors import FAILED, ToolError

CACHE_ENV = "VERTEX_TOOLS_CACHE"
XGBOOST = "xgboost-cpu==2.1.4"
HF_SERVE = "hf-serve==0.1.1"
# hf-serve's imports on the text-classification path, beside torch and transformers.
HF_SERVE_STACK = (
    "fastapi>=0.115.6",
    "uvicorn>=0.34",
    "starlette>=1.0.1",
    "prometheus-client>=0.21.1",
    "python-multipart>=0.0.20",
    "python-magic>=0.4.27",
    "pillow>=11.1",
    "requests",
)
PREDICTOR = Path(__file__).with_name("xgboost_predictor.py")
COMPLETE = ".complete"


def cache_root() -> Path:
    default = Path.home() / ".cache" / "vertex-trainer-tools"
    return Path(os.environ.get(CACHE_ENV) or default) / "serving"


def _pip(python: str, *args: str) -> None:
    command = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise ToolError(f"pip install {' '.join(args)}: {lines[-1]}", exit_code=FAILED)


def cached(name: str, make) -> Path:
    """``cache_root()/name``, made by ``make(folder)`` the first time (once, under a lock)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / COMPLETE).exists():
            return target
        print(f"vertex-tools: installing {name} into {target} (once)", file=sys.stderr)
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            make(scratch)
            (scratch / COMPLETE).write_text("")
            shutil.rmtree(target, ignore_errors=True)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def xgboost_env() -> Path:
    """The Python of a virtual environment with the prediction image's xgboost."""

    def make(folder: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        _pip(str(folder / "bin" / "python"), XGBOOST)

    # the venv's own python resolves its site-packages from where it lies: valid after the rename
    return cached(XGBOOST.replace("==", "-"), make) / "bin" / "python"


def xgboost_predict(model_dir: str | Path, body: dict[str, Any]) -> dict[str, Any]:
    """``model.bst`` answered by the predictor script in the xgboost 2.1 environment."""
    done = subprocess.run(
        [str(xgboost_env()), str(PREDICTOR), str(Path(model_dir) / "model.bst")],
        input=json.dumps(body),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise ToolError(f"{model_dir}/model.bst: {lines[-1]}")
    try:
        response = json.loads(done.stdout)
    except ValueError:
        raise ToolError(f"{model_dir}/model.bst: the predictor printed no JSON") from None
    print(f"served by xgboost {response.pop('xgboost')}", file=sys.stderr)
    return response


def hf_serve_path(python: str = sys.executable) -> Path:
    """A folder with hf-serve and its web stack, for ``PYTHONPATH`` of the project's Python."""

    def make(folder: Path) -> None:
        _pip(python, "--target", str(folder), "--no-deps", HF_SERVE)
        _pip(python, "--target", str(folder / "stack"), *HF_SERVE_STACK)

    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cached(f"{HF_SERVE.replace('==', '-')}-{tag}", make)
