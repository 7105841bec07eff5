"""``vertex_trainer_runtime.keras.checkpoint_callback``'s watchdog: a replica held after the
checkpoint of a notice is published (a collective whose peer is gone) exits for a restart a few
seconds later, with every thread's stack in its log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("keras")

HELD_AFTER_THE_SAVE = """
import time
from vertex_trainer_runtime import preemption
from vertex_trainer_runtime.keras import checkpoint_callback

class Publisher:
    def finish_within(self, seconds):
        print(f"publisher given {seconds:.0f} s", flush=True)

class State:
    publisher = Publisher()

notice = preemption.Notice()
checkpoint_callback.exit_if_notice_outlives(notice, State(), seconds=60, after_save=0.5)
notice.agreed(True)  # SIGTERM went to another replica: this one never got it
notice.preempted("checkpoint-3")

def held_in_a_collective():
    time.sleep(60)

held_in_a_collective()
"""


def test_a_replica_held_after_the_notice_checkpoint_exits_with_its_stacks_logged():
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HELD_AFTER_THE_SAVE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 143, result.stderr
    assert time.monotonic() - started < 50, "the watchdog waited for the 60 s SIGTERM bound"
    assert "Still running 0.5 s after the checkpoint of the notice was published" in result.stderr
    assert "held_in_a_collective" in result.stderr  # the main thread's stack, where it was held
    assert "publisher given 29 s" in result.stdout  # the grace, less a second
