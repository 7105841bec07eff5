"""A helper process that cleans up after this one if it dies before ``release()``.

A process killed with SIGKILL (``kill -9``, the OOM killer) runs no clean-up of its own, and
what it started would go on: containers training, replica processes. The guard is a small
process in a session of its own (Ctrl-C and a closed terminal do not reach it) that reads a pipe
from this one: the pipe closes whenever this process ends, and only ``release()`` writes
``done`` into it first. The module it runs (``python -m MODULE guard ID``) does the clean-up.
"""

from __future__ import annotations

import subprocess
import sys


class Guard:
    def __init__(self, module: str, guarded_id: str):
        self._process = subprocess.Popen(
            [sys.executable, "-m", module, "guard", guarded_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def release(self) -> None:
        """This process cleaned up itself: the guard ends without touching anything."""
        try:
            self._process.stdin.write(b"done\n")
            self._process.stdin.close()
        except OSError:  # the guard is gone already
            pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def released() -> bool:
    """In the guard process: True when the guarded process released it, False when it died."""
    return sys.stdin.read().strip() == "done"
