"""Each task's part of a step's checkpoint under MultiWorkerMirroredStrategy, and the chief's
marker over all of them.

Part of vertex-trainer-runtime (``vertex_trainer_runtime.keras``). A step is one folder,
``checkpoint-<step>/``; when distributed each task writes its part, ``<task>-<index>/``, with its
own marker, and the chief marks the step complete once every part is: a step counts only when
every task can resume from it.
"""

from __future__ import annotations

import logging
import os
import time

from vertex_trainer_runtime import checkpoints, publisher, runtime

logger = logging.getLogger(__name__)

# How long the chief waits for the other tasks' parts of a step before it leaves the step without
# its marker: at least this, or 3 times its own copy's time.
PARTS_WAIT_SECONDS = 30.0


class Tasks:
    """This task's part of a step's checkpoint folder and every task's (one task: no parts)."""

    def __init__(self, part: str = "", parts: tuple[str, ...] = (), is_chief: bool = True):
        self.part = part  # e.g. "worker-0"; "" when the job has one task
        self.parts = parts  # every task's, the chief's first
        self.is_chief = is_chief

    @classmethod
    def of(cls, cluster) -> Tasks:
        if not cluster.is_distributed:
            return cls()
        parts = tuple(
            f"{runtime.POOL_TO_TF_TASK[pool]}-{index}"
            for pool in runtime.TRAINING_POOLS
            for index in range(len(cluster.pools.get(pool, [])))
        )
        return cls(f"{cluster.task_type}-{cluster.index}", parts, cluster.is_chief)


class TaskPublisher(publisher.Publisher):
    """Publishes this task's part of each step; the chief then marks the step complete (its
    marker lists every task's files) and prunes."""

    def __init__(self, root: str, tasks: Tasks, keep: int = 2):
        super().__init__(root, keep=keep)
        self.tasks = tasks

    def publish_once(self, source: str, step: int, metadata) -> None:
        folder = checkpoints.path_for(self.root, step)
        part = os.path.join(folder, self.tasks.part)
        os.makedirs(part, exist_ok=True)
        # A rerun saving a step again: its old markers go first (the step's is the chief's).
        stale = [os.path.join(part, checkpoints.MARKER)]
        if self.tasks.is_chief:
            stale.append(os.path.join(folder, checkpoints.MARKER))
        for marker in stale:
            if os.path.exists(marker):
                os.remove(marker)
        started = time.monotonic()
        checkpoints.copy_files(source, part)
        checkpoints.mark_complete(part, step, metadata)
        patience = max(PARTS_WAIT_SECONDS, 3 * (time.monotonic() - started))
        if not self.tasks.is_chief:
            logger.info("Checkpoint %d: part %s saved to %s", step, self.tasks.part, part)
            return
        waiting = [os.path.join(folder, name, checkpoints.MARKER) for name in self.tasks.parts]
        deadline = time.monotonic() + patience
        while not all(os.path.exists(marker) for marker in waiting):
            if time.monotonic() > deadline:
                missing = [m for m in waiting if not os.path.exists(m)]
                logger.warning(
                    "Checkpoint %d stays incomplete: no part from %s after %g s",
                    step,
                    ", ".join(os.path.basename(os.path.dirname(m)) for m in missing),
                    patience,
                )
                return
            time.sleep(0.1)
        checkpoints.mark_complete(folder, step, metadata)
        logger.info("Checkpoint %d saved to %s (all %d tasks' parts)", step, folder, len(waiting))
        checkpoints.prune(self.root, keep=self.keep)
