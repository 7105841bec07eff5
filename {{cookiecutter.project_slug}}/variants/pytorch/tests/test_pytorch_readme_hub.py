"""The README's pretrained-model command, run exactly as written, offline.

``make train-local ARGS="--model-name-or-path=google/..."`` loads a model by its Hub id. Here the
Hub cache is filled beforehand with the tiny BERT under that id (the layout
``huggingface_hub`` reads with ``HF_HUB_OFFLINE=1``), so the command takes the same
``from_pretrained(<hub id>)`` path as on a machine with network access.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
COPY_IGNORE = shutil.ignore_patterns(
    "outputs", "build", "dist", ".venv", ".git", "__pycache__", ".pytest_cache", "*.egg-info"
)
SNAPSHOT = "0" * 40
# The command exactly as README.md shows it (run below, through bash).
README_COMMAND = 'make train-local ARGS="--model-name-or-path=google/bert_uncased_L-2_H-128_A-2"'


def readme_hub_command() -> str:
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in text.splitlines() if 'ARGS="--model-name-or-path=' in line]
    return line.split("  #")[0].strip()


@pytest.mark.slow
def test_readme_pretrained_model_command_runs_as_written(tiny_bert, tmp_path):
    command = readme_hub_command()
    assert command == README_COMMAND
    model_id = re.search(r"--model-name-or-path=([^\"\s]+)", command).group(1)
    cache = tmp_path / "hf" / "hub" / ("models--" + model_id.replace("/", "--"))
    shutil.copytree(tiny_bert, cache / "snapshots" / SNAPSHOT)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(SNAPSHOT)
    project = tmp_path / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=COPY_IGNORE)

    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = sys.executable  # the Makefile's PYTHON ?= python
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(name, None)
    result = subprocess.run(
        ["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert f"Loaded {model_id}" in result.stdout + result.stderr, "not loaded by its Hub id"
    model = project / "outputs" / "local" / "latest" / "model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
