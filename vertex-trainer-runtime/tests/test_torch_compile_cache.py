"""vertex_trainer_runtime.torch.compile_cache: torch.compile's cache written beside the
checkpoints, atomically, and hot-loaded by the next attempt; a damaged one or one of another torch
is one log line, then the graphs compile afresh."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from vertex_trainer_runtime.torch import compile_cache  # noqa: E402


def test_the_header_vouches_for_the_torch_version_and_the_bytes():
    data = compile_cache.encode(b"graphs\nand more", version="2.13.0")
    assert compile_cache.decode(data, version="2.13.0") == b"graphs\nand more"
    with pytest.raises(ValueError, match="written by torch 2.13.0, this is torch 2.14.0"):
        compile_cache.decode(data, version="2.14.0")
    with pytest.raises(ValueError, match="checksum"):
        compile_cache.decode(data[:-1], version="2.13.0")
    with pytest.raises(ValueError, match="truncated"):
        compile_cache.decode(compile_cache.MAGIC + b"2.13.0", version="2.13.0")
    with pytest.raises(ValueError, match="not a cache"):
        compile_cache.decode(b"\x00" * 100)


def our_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]


@pytest.mark.parametrize(
    "content",
    [
        b"half a file",
        compile_cache.encode(b"not torch's artifacts"),  # the checksum holds: torch refuses them
        compile_cache.encode(b"x", version="0.0.1"),
    ],
    ids=["damaged", "not loadable", "another torch"],
)
def test_a_cache_that_cannot_be_used_is_one_line_and_no_cache(tmp_path, caplog, content):
    (tmp_path / compile_cache.FILE).write_bytes(content)
    caplog.set_level(logging.DEBUG)
    assert compile_cache.load(str(tmp_path)) is False
    (line,) = our_lines(caplog)
    assert line.startswith("Not using torch.compile's cache") and "compiling afresh" in line


def test_no_cache_yet_is_said_nowhere(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    assert compile_cache.load(str(tmp_path)) is False
    assert not our_lines(caplog)


def test_a_save_replaces_the_file_whole_and_leaves_no_partial_file(tmp_path, monkeypatch):
    (tmp_path / compile_cache.FILE).write_bytes(b"an older one")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", None))
    assert compile_cache.save(str(tmp_path))
    assert os.listdir(tmp_path) == [compile_cache.FILE]
    data = (tmp_path / compile_cache.FILE).read_bytes()
    assert compile_cache.decode(data) == b"artifacts"


def test_a_failed_save_is_one_line_and_training_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", None))
    (tmp_path / "file").write_text("not a folder")
    assert compile_cache.save(str(tmp_path / "file")) is False
    (line,) = our_lines(caplog)
    assert line.startswith("Cannot save torch.compile's cache")


class State:
    def __init__(self, rank0: bool):
        self.is_world_process_zero = rank0


def test_rank_0_saves_once_and_an_attempt_that_loaded_saves_nothing(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(compile_cache, "save", saved.append)
    monkeypatch.setattr(compile_cache, "load", lambda folder: folder == "loaded")
    for folder, rank0 in (("fresh", True), ("fresh", False), ("loaded", True)):
        callback = compile_cache.CompileCache(folder)
        callback.on_train_begin(None, State(rank0), None)
        for _ in range(3):
            callback.on_save(None, State(rank0), None)
    assert saved == ["fresh"]


ATTEMPT = """
import sys, torch
from torch._dynamo.utils import counters
from vertex_trainer_runtime.torch import compile_cache

folder = sys.argv[1]
compile_cache.load(folder)
double = torch.compile(lambda x: (x * 2).relu() + 1)
double(torch.ones(4))
if compile_cache.save(folder):
    print("saved")
print("hits", counters["inductor"]["fxgraph_cache_hit"])
"""


def test_a_second_attempt_on_a_fresh_machine_reuses_the_first_ones_graphs(tmp_path):
    """Two processes, each with an empty inductor cache folder (a restart's fresh VM)."""

    def attempt(name: str) -> str:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name)}
        return subprocess.run(
            [sys.executable, "-c", ATTEMPT, str(tmp_path / "checkpoints")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout

    first = attempt("first")
    assert "saved" in first and "hits 0" in first, first
    second = attempt("second")
    assert "hits 1" in second, second
