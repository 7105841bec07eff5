"""The complete-marker protocol of ``vertex_trainer_runtime.checkpoints`` (every variant's):
resume only from checkpoints whose every file arrived."""

from __future__ import annotations

import logging
import os

import pytest

from vertex_trainer_runtime import checkpoints


def marked(root: str) -> list[checkpoints.Checkpoint]:
    """The checkpoints under ``root`` whose marker exists, whole or not."""
    return [c for c in checkpoints.list_checkpoints(root) if os.path.exists(c.marker)]


def make_source(folder, content: bytes = b"weights") -> str:
    os.makedirs(os.path.join(folder, "nested"), exist_ok=True)
    with open(os.path.join(folder, "model.bin"), "wb") as handle:
        handle.write(content)
    with open(os.path.join(folder, "nested", "state.json"), "w") as handle:
        handle.write('{"step": 1}')
    return str(folder)


def test_publish_copies_files_then_writes_the_marker(tmp_path):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    checkpoint = checkpoints.publish(source, root, step=5, metadata={"epoch": 2})
    assert checkpoint.path == os.path.join(root, "checkpoint-5")
    assert checkpoints.problem(checkpoint) is None
    metadata = checkpoint.metadata()
    assert metadata["step"] == 5 and metadata["epoch"] == 2
    assert metadata["files"] == {"model.bin": 7, "nested/state.json": 11}
    assert checkpoints.latest_complete(root) == checkpoint


def test_newest_complete_wins_and_partial_ones_are_skipped_with_a_warning(tmp_path, caplog):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    checkpoints.publish(source, root, step=10)
    checkpoints.publish(source, root, step=20)
    # A replica killed mid-copy leaves a newer folder without a marker.
    partial = checkpoints.path_for(root, 30)
    os.makedirs(partial)
    with open(os.path.join(partial, "model.bin"), "wb") as handle:
        handle.write(b"wei")
    with caplog.at_level(logging.WARNING):
        latest = checkpoints.latest_complete(root)
    assert latest.step == 20
    assert "checkpoint-30" in caplog.text and "no COMPLETE marker" in caplog.text


def test_truncated_or_missing_file_after_the_marker_is_skipped(tmp_path):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    checkpoints.publish(source, root, step=1)
    newest = checkpoints.publish(source, root, step=2)
    with open(os.path.join(newest.path, "model.bin"), "wb") as handle:
        handle.write(b"w")
    assert "model.bin has 1 bytes" in checkpoints.problem(newest)
    assert checkpoints.latest_complete(root).step == 1
    os.remove(os.path.join(newest.path, "model.bin"))
    assert checkpoints.problem(newest) == "model.bin is missing"


def test_unreadable_marker_is_skipped(tmp_path):
    root = str(tmp_path / "ckpts")
    checkpoint = checkpoints.publish(make_source(tmp_path / "local"), root, step=3)
    with open(checkpoint.marker, "w") as handle:
        handle.write('{"files": ')
    assert checkpoints.problem(checkpoint).startswith("unreadable COMPLETE marker")
    assert checkpoints.latest_complete(root) is None


def test_validator_rejects_a_checkpoint_the_framework_cannot_load(tmp_path, caplog):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    checkpoints.publish(source, root, step=1)
    checkpoints.publish(source, root, step=2)

    def validate(path):
        if path.endswith("checkpoint-2"):
            raise ValueError("corrupt optimizer state")

    with caplog.at_level(logging.WARNING):
        assert checkpoints.latest_complete(root, validate=validate).step == 1
    assert "corrupt optimizer state" in caplog.text


def test_no_checkpoints(tmp_path):
    assert checkpoints.latest_complete(str(tmp_path / "missing")) is None
    assert checkpoints.list_checkpoints(str(tmp_path)) == []


def test_other_folders_are_not_checkpoints(tmp_path):
    for name in ("checkpoint-abc", "backup", "checkpoint-7.tmp"):
        os.makedirs(tmp_path / name)
    (tmp_path / "checkpoint-9").write_text("a file, not a folder")
    assert checkpoints.list_checkpoints(str(tmp_path)) == []


def test_steps_sort_numerically(tmp_path):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    for step in (9, 100, 20):
        checkpoints.publish(source, root, step=step)
    assert [c.step for c in checkpoints.list_checkpoints(root)] == [9, 20, 100]
    assert checkpoints.latest_complete(root).step == 100


def test_republishing_a_step_replaces_it(tmp_path):
    root = str(tmp_path / "ckpts")
    checkpoints.publish(make_source(tmp_path / "a", b"old"), root, step=4)
    checkpoint = checkpoints.publish(make_source(tmp_path / "b", b"newer"), root, step=4)
    assert checkpoint.metadata()["files"]["model.bin"] == 5
    assert checkpoints.problem(checkpoint) is None


def test_mark_complete_for_files_written_in_place(tmp_path):
    root = str(tmp_path / "ckpts")
    folder = make_source(checkpoints.path_for(root, 12))
    assert checkpoints.latest_complete(root) is None
    checkpoints.mark_complete(folder, step=12)
    assert checkpoints.latest_complete(root).step == 12


def test_a_save_killed_while_writing_the_marker_leaves_no_marker(tmp_path, monkeypatch):
    """The kill drill and restarted replicas see the marker whole or not at all."""
    root = str(tmp_path / "ckpts")
    folder = make_source(checkpoints.path_for(root, 12))

    def killed_mid_write(record, handle, **kwargs):
        handle.write('{"files": {')
        handle.flush()
        raise KeyboardInterrupt("preempted")

    monkeypatch.setattr(checkpoints.json, "dump", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.mark_complete(folder, step=12)
    assert marked(root) == []
    assert checkpoints.latest_complete(root) is None
    monkeypatch.undo()
    # The rerun saves the same step again; the leftover partial marker is not one of its files.
    checkpoint = checkpoints.publish(make_source(tmp_path / "again"), root, step=12)
    assert checkpoints.problem(checkpoint) is None
    assert checkpoints.PARTIAL_MARKER not in checkpoint.metadata()["files"]
    assert marked(root) == [checkpoint]


def test_restore_copies_only_listed_files_into_a_fresh_folder(tmp_path):
    root = str(tmp_path / "ckpts")
    checkpoint = checkpoints.publish(make_source(tmp_path / "local"), root, step=1)
    destination = tmp_path / "restored"
    destination.mkdir()
    (destination / "stale.txt").write_text("left over from a previous attempt")
    checkpoints.restore(checkpoint, str(destination))
    restored = sorted(
        os.path.relpath(os.path.join(d, n), destination)
        for d, _, names in os.walk(destination)
        for n in names
    )
    assert restored == ["model.bin", os.path.join("nested", "state.json")]
    assert (destination / "model.bin").read_bytes() == b"weights"


def test_prune_keeps_the_newest_complete_ones(tmp_path):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    for step in (1, 2, 3, 4):
        checkpoints.publish(source, root, step=step)
    os.makedirs(checkpoints.path_for(root, 0))  # an old partial one
    os.makedirs(checkpoints.path_for(root, 5))  # a newer partial one may still be in flight
    checkpoints.prune(root, keep=2)
    assert [c.step for c in checkpoints.list_checkpoints(root)] == [3, 4, 5]


def test_gcs_root_goes_through_the_fuse_mount():
    with pytest.raises(RuntimeError, match="/gcs/"):
        checkpoints.list_checkpoints("gs://no-such-bucket-for-tests/ckpt")


def test_interval():
    now = [100.0]
    interval = checkpoints.Interval(minutes=1, clock=lambda: now[0])
    assert not interval.due()
    now[0] += 61
    assert interval.due()
    interval.reset()
    assert not interval.due()
    assert not checkpoints.Interval(minutes=0).due()


def test_max_step_limits_the_search_to_an_agreed_step(tmp_path):
    source = make_source(tmp_path / "local")
    root = str(tmp_path / "ckpts")
    for step in (1, 2, 3):
        checkpoints.publish(source, root, step=step)
    assert checkpoints.latest_complete(root, max_step=2).step == 2

    def reject_two(path):
        if path.endswith("checkpoint-2"):
            raise ValueError("unreadable")

    assert checkpoints.latest_complete(root, validate=reject_two, max_step=2).step == 1
    assert checkpoints.latest_complete(root, max_step=0) is None
