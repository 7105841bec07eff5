"""``vertex_trainer_runtime.publisher`` (every variant's): checkpoints are copied to the checkpoint
dir in the background, marker last, one at a time, retried on failure."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading

import pytest

from vertex_trainer_runtime import checkpoints, publisher


def marked(root: str) -> list[checkpoints.Checkpoint]:
    """The checkpoints under ``root`` whose marker exists, whole or not."""
    return [c for c in checkpoints.list_checkpoints(root) if os.path.exists(c.marker)]


def local_checkpoint(tmp_path, step: int, size: int = 1000) -> str:
    folder = tmp_path / f"local-{step}"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * size)
    (folder / "state.json").write_text(json.dumps({"step": step}))
    return str(folder)


@pytest.fixture
def gated_copy(monkeypatch):
    """shutil.copyfile that waits for ``gate`` before copying (a slow store), counting calls."""
    gate, calls = threading.Event(), []
    real = shutil.copyfile

    def copyfile(source, destination, **kwargs):
        calls.append(destination)
        assert gate.wait(30), "the test never opened the gate"
        return real(source, destination, **kwargs)

    monkeypatch.setattr(checkpoints.shutil, "copyfile", copyfile)
    return gate, calls


def test_training_goes_on_while_the_checkpoint_is_copied(tmp_path, gated_copy):
    gate, _ = gated_copy
    root = str(tmp_path / "checkpoints")
    source = local_checkpoint(tmp_path, 10)
    publishing = publisher.Publisher(root)
    publishing.submit(source, 10, {"epoch": 1})  # returns with the copy still waiting
    assert checkpoints.latest_complete(root) is None, "no marker before the files"
    gate.set()
    publishing.wait()
    latest = checkpoints.latest_complete(root)
    assert latest.step == 10 and latest.metadata()["epoch"] == 1
    assert sorted(checkpoints.listed_files(latest)) == ["state.json", "weights.bin"]
    assert not (tmp_path / "local-10").exists(), "an owned local folder is removed once copied"


def test_a_later_save_waits_for_the_publish_in_flight(tmp_path, gated_copy):
    gate, calls = gated_copy
    root = str(tmp_path / "checkpoints")
    publishing = publisher.Publisher(root)
    publishing.submit(local_checkpoint(tmp_path, 1), 1)
    second = threading.Thread(target=publishing.submit, args=(local_checkpoint(tmp_path, 2), 2))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second save must wait for the first publish"
    assert all("checkpoint-1" in call for call in calls), "one publish in flight at a time"
    gate.set()
    second.join(30)
    publishing.wait()
    assert [c.step for c in marked(root)] == [1, 2]
    assert publishing.waited_seconds >= 0.4


def test_a_failed_copy_is_retried_and_logged(tmp_path, monkeypatch, caplog):
    real, failures = shutil.copyfile, ["once"]

    def flaky(source, destination, **kwargs):
        if failures:
            failures.pop()
            raise OSError("Transport endpoint is not connected")
        return real(source, destination, **kwargs)

    monkeypatch.setattr(checkpoints.shutil, "copyfile", flaky)
    root = str(tmp_path / "checkpoints")
    publishing = publisher.Publisher(root, retry_seconds=0)
    with caplog.at_level(logging.WARNING):
        publishing.submit(local_checkpoint(tmp_path, 5), 5)
        publishing.wait()
    assert checkpoints.latest_complete(root).step == 5
    assert "Publishing checkpoint 5 failed (attempt 1 of 3" in caplog.text


def test_when_every_attempt_fails_no_marker_is_written_and_wait_raises(tmp_path, monkeypatch):
    def broken(source, destination, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoints.shutil, "copyfile", broken)
    root = str(tmp_path / "checkpoints")
    publishing = publisher.Publisher(root, attempts=2, retry_seconds=0)
    publishing.submit(local_checkpoint(tmp_path, 7), 7, owned=False)
    with pytest.raises(publisher.PublishError, match="No space left"):
        publishing.wait()
    assert marked(root) == []
    assert (tmp_path / "local-7").is_dir(), "a folder the caller owns is left to the caller"
    publishing.wait()  # the failure is raised once


def test_published_checkpoints_are_pruned_to_the_newest_two(tmp_path):
    root = str(tmp_path / "checkpoints")
    publishing = publisher.Publisher(root, keep=2)
    for step in (1, 2, 3):
        publishing.submit(local_checkpoint(tmp_path, step), step)
    publishing.close()
    assert [c.step for c in checkpoints.list_checkpoints(root)] == [2, 3]
