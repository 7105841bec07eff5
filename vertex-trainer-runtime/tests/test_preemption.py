"""The preemption notice of ``vertex_trainer_runtime.preemption`` (every variant's) with the
complete-marker protocol of ``vertex_trainer_runtime.checkpoints``: SIGTERM is recorded, a second
one does not stop a save, and a save that SIGKILL cuts short never has a marker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from vertex_trainer_runtime import checkpoints, preemption


def test_the_notice_records_sigterm_and_a_second_one_changes_nothing():
    clock = iter([10.0, 12.5, 99.0]).__next__
    notice = preemption.Notice(clock=clock).install()
    try:
        assert signal.getsignal(signal.SIGTERM) == notice.handle
        assert not notice.received and notice.seconds_since() is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
        os.kill(os.getpid(), signal.SIGTERM)
        assert notice.received and notice.signals == 2
        assert preemption.noticed()  # what task.py asks once a run finished
        assert notice.seconds_since() == 2.5  # from the first one
    finally:
        notice.uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_replicas_agree_and_the_exit_line_says_what_was_saved():
    notice = preemption.Notice(clock=lambda: 5.0)
    assert not notice.agreed(False) and not notice.stopping
    assert notice.agreed(True) and notice.stopping  # another replica got it
    assert notice.seconds_since_saved() is None
    stop = notice.preempted("checkpoint-40")
    assert stop.seconds is None and notice.seconds_since_saved() == 0.0  # the watchdog's clock
    assert stop.message() == (
        "preemption notice: saved checkpoint-40, exiting for a restart "
        "(exit 143; SIGTERM reached another replica)"
    )
    notice.handle()
    assert "(exit 143; 0.0 s after SIGTERM)" in notice.preempted("checkpoint-40").message()
    assert preemption.EXIT_CODE == 143


# A replica that gets SIGTERM during training: it saves at the next step with a slow copy (a
# /gcs/ mount) and exits 143; the test's signals arrive while it copies.
SAVE_ON_NOTICE = """
import os, shutil, sys, time
from vertex_trainer_runtime import checkpoints, preemption

root, local = sys.argv[1], sys.argv[2]
checkpoints.publish(local, root, 1)
notice = preemption.Notice().install()
print("training", flush=True)
while not notice.received:
    time.sleep(0.01)  # a step

copy = shutil.copyfile
def slow_copy(source, target):
    print("copying", os.path.basename(target), flush=True)
    time.sleep(0.4)
    return copy(source, target)
shutil.copyfile = slow_copy
checkpoints.publish(local, root, 2)
print(f"signals {notice.signals}", flush=True)
preemption.exit_now(preemption.EXIT_CODE)
"""


def _replica(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    for name in ("a.bin", "b.bin", "c.bin"):
        (local / name).write_bytes(b"x" * 1000)
    script = tmp_path / "replica.py"
    script.write_text(textwrap.dedent(SAVE_ON_NOTICE))
    root = tmp_path / "checkpoints"
    process = subprocess.Popen(
        [sys.executable, str(script), str(root), str(local)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "training"
    return process, str(root)


def test_a_second_sigterm_does_not_stop_the_save(tmp_path):
    process, root = _replica(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().startswith("copying")
    process.send_signal(signal.SIGTERM)  # torchrun's agent forwards the one it got
    out, _ = process.communicate(timeout=30)
    assert process.returncode == preemption.EXIT_CODE
    assert "signals 2" in out
    latest = checkpoints.latest_complete(root)
    assert latest.step == 2 and checkpoints.problem(latest) is None


def test_sigkill_before_the_save_ends_leaves_no_marker(tmp_path):
    # The grace period ends mid-copy: the folder of step 2 has files but never a marker, and a
    # restart resumes from step 1.
    process, root = _replica(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().startswith("copying")
    assert process.stdout.readline().startswith("copying")
    process.kill()
    process.wait(timeout=30)
    partial = checkpoints.path_for(root, 2)
    time.sleep(0.1)
    assert os.listdir(partial) and not os.path.exists(os.path.join(partial, checkpoints.MARKER))
    assert not os.path.exists(os.path.join(partial, checkpoints.PARTIAL_MARKER))
    assert checkpoints.latest_complete(root).step == 1
