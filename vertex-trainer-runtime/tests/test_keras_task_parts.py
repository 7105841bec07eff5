"""``vertex_trainer_runtime.keras.task_parts``: under MultiWorkerMirroredStrategy each task
publishes its part of a step; the chief marks the step complete once every part is, so a step
missing a part is never resumed from."""

from __future__ import annotations

import pytest

pytest.importorskip("keras")

from vertex_trainer_runtime import checkpoints  # noqa: E402
from vertex_trainer_runtime.keras import task_parts  # noqa: E402


def test_a_step_is_complete_only_once_every_task_published_its_part(tmp_path, monkeypatch):
    monkeypatch.setattr(task_parts, "PARTS_WAIT_SECONDS", 0.5)
    root = str(tmp_path / "checkpoints")
    parts = ("chief-0", "worker-0")
    chief = task_parts.TaskPublisher(root, task_parts.Tasks("chief-0", parts, is_chief=True))
    worker = task_parts.TaskPublisher(root, task_parts.Tasks("worker-0", parts, is_chief=False))

    def local(step: int):
        folder = tmp_path / f"local-{step}"
        folder.mkdir(exist_ok=True)
        (folder / "ckpt.index").write_text(f"step {step}")
        return str(folder)

    for step in (4, 8):
        worker.publish_once(local(step), step, {"epochs_done": step // 4})
        chief.publish_once(local(step), step, {"epochs_done": step // 4})
    assert checkpoints.latest_complete(root).step == 8
    # Step 12: the chief's part is published, the worker's never comes (killed in between).
    chief.publish_once(local(12), 12, {"epochs_done": 3})
    assert (tmp_path / "checkpoints" / "checkpoint-12" / "chief-0" / checkpoints.MARKER).is_file()
    latest = checkpoints.latest_complete(root)
    assert latest.step == 8 and latest.metadata()["epochs_done"] == 2
    # The step's marker vouches for every part's files.
    assert sorted(latest.metadata()["files"]) == [
        "chief-0/COMPLETE",
        "chief-0/ckpt.index",
        "worker-0/COMPLETE",
        "worker-0/ckpt.index",
    ]


def test_the_parts_of_a_job_are_its_training_tasks_chief_first():
    cluster = type(
        "Cluster",
        (),
        {
            "is_distributed": True,
            "is_chief": False,
            "task_type": "worker",
            "index": 1,
            # a Reduction Server in pool 2 writes no part
            "pools": {"workerpool0": ["a:1"], "workerpool1": ["b:1", "c:1"], "workerpool2": ["r"]},
        },
    )
    tasks = task_parts.Tasks.of(cluster)
    assert (tasks.part, tasks.parts, tasks.is_chief) == (
        "worker-1",
        ("chief-0", "worker-0", "worker-1"),
        False,
    )
    single = task_parts.Tasks.of(type("Cluster", (), {"is_distributed": False}))
    assert (single.part, single.parts, single.is_chief) == ("", (), True)
