"""Checkpoints cross to the checkpoint dir off the training step's path.

Writing a checkpoint to local disk is quick; copying it to ``/gcs/`` is not (a BERT-base
checkpoint with its optimizer state is about 1.3 GB), and a synchronous copy stops training for
all of it. A ``Publisher`` copies each finished local checkpoint on a thread of its own, marker
last (``checkpoints.publish``), then prunes, while training goes on:

- at most one publish is in flight: ``submit`` waits for the previous one first;
- ``wait`` returns once the last publish is complete: the final save and the save on a
  preemption notice call it before the process ends;
- a failed copy is logged and retried; if every attempt fails the error is logged, the
  checkpoint stays without its marker (so it is never resumed from), and the next ``wait``
  raises it.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Mapping

from vertex_trainer_runtime import checkpoints, ledger

logger = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """Every attempt to publish a checkpoint failed."""


class Publisher:
    def __init__(self, root: str, keep: int = 2, attempts: int = 3, retry_seconds: float = 5.0):
        self.root = root
        self.keep = keep
        self.attempts = attempts
        self.retry_seconds = retry_seconds
        self.waited_seconds = 0.0  # how long training waited for publishing, in all
        self._thread: threading.Thread | None = None
        self._failure: Exception | None = None

    def submit(
        self, source: str, step: int, metadata: Mapping | None = None, owned: bool = True
    ) -> None:
        """Publish the local folder ``source`` as ``checkpoint-<step>``, in the background.

        ``owned``: the folder is this publisher's to delete once copied (a temporary folder);
        the caller must not change it until then either way.
        """
        self._join()
        self._failure = None
        self._thread = threading.Thread(
            target=self._publish,
            args=(source, step, dict(metadata or {}), owned),
            name=f"publish-checkpoint-{step}",
            daemon=True,
        )
        self._thread.start()

    def wait(self) -> None:
        """Block until the last checkpoint submitted is published; raise if it could not be."""
        self._join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise PublishError(str(failure)) from failure

    def finish_within(self, seconds: float) -> bool:
        """From any thread: wait up to ``seconds`` for the publish in flight; True if none is."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout=max(0.0, seconds))
            return not thread.is_alive()
        return True

    def close(self) -> None:
        """``wait`` for the last checkpoint, then say how long training waited for publishing."""
        during = self.waited_seconds
        self.wait()
        logger.info(
            "Training waited %.1f s for checkpoints to publish, then %.1f s for the last one",
            during,
            self.waited_seconds - during,
        )

    def _join(self) -> None:
        if self._thread is None:
            return
        started = time.monotonic()
        self._thread.join()
        self._thread = None
        self.waited_seconds += time.monotonic() - started

    def publish_once(self, source: str, step: int, metadata: Mapping) -> None:
        """One attempt: copy ``source`` as ``checkpoint-<step>``, marker last, then prune.
        A framework whose tasks each write a part of one step overrides it (Keras)."""
        checkpoints.publish(source, self.root, step, metadata)
        checkpoints.prune(self.root, keep=self.keep)

    def _publish(self, source: str, step: int, metadata: dict, owned: bool) -> None:
        started = time.monotonic()
        try:
            for attempt in range(1, self.attempts + 1):
                try:
                    self.publish_once(source, step, metadata)
                    seconds = time.monotonic() - started
                    ledger.record("checkpoint_published", step=step, seconds=seconds)
                    logger.info(
                        "Checkpoint %d published in %.1f s (in the background)",
                        step,
                        time.monotonic() - started,
                    )
                    return
                except OSError as error:  # the store: worth another try
                    if attempt == self.attempts:
                        self._failure = error
                        logger.error(
                            "Checkpoint %d was not published after %d attempts: %s",
                            step,
                            attempt,
                            error,
                        )
                        return
                    logger.warning(
                        "Publishing checkpoint %d failed (attempt %d of %d, retrying in %g s): %s",
                        step,
                        attempt,
                        self.attempts,
                        self.retry_seconds,
                        error,
                    )
                    time.sleep(self.retry_seconds)
        except Exception as error:  # noqa: BLE001 - not the store's: kept for wait() to raise
            self._failure = error
            logger.exception("Checkpoint %d was not published", step)
        finally:
            if owned:
                shutil.rmtree(source, ignore_errors=True)
