"""The notice's hard limit: a replica never outlives the grace period Compute Engine gives it."""

from __future__ import annotations

import threading

import pytest

from vertex_trainer_runtime import preemption

pytest.importorskip("xgboost")

from vertex_trainer_runtime.xgboost.preemption_hook import ExitBeforeTheVMStops  # noqa: E402


def _recorder():
    codes, fired = [], threading.Event()

    def exit_process(code):
        codes.append(code)
        fired.set()

    return codes, fired, exit_process


def test_work_that_outlasts_the_grace_after_sigterm_ends_the_process_with_143():
    """E.g. an export after the last round that cannot finish before the VM stops: the final
    checkpoint is complete, so exit 143 and let the rerun export."""
    notice = preemption.Notice()
    codes, fired, exit_process = _recorder()
    with ExitBeforeTheVMStops(notice, grace=0.6, margin=0.1, exit=exit_process):
        notice.handle()
        assert fired.wait(60)  # the work in the block never ends by itself
        assert notice.seconds_since() >= 0.5
    assert codes == [preemption.EXIT_CODE]


def test_work_done_in_time_or_without_a_notice_is_left_alone():
    for signals in (0, 2):  # no notice; two SIGTERMs (the second changes nothing)
        notice = preemption.Notice()
        codes, fired, exit_process = _recorder()
        with ExitBeforeTheVMStops(notice, grace=30, margin=5, exit=exit_process):
            for _ in range(signals):
                notice.handle()
        assert not fired.wait(0.5) and codes == []
