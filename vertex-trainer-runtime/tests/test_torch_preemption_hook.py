"""vertex_trainer_runtime.torch.preemption_hook: the flags ranks share each step."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from vertex_trainer_runtime.torch import preemption_hook  # noqa: E402


def test_the_flags_of_one_process_are_its_own():
    flags = preemption_hook.Flags()
    flags.open()  # no process group: nothing to open
    assert flags.agreed() is None and not flags.pending
    flags.share(True, False)
    assert flags.pending and flags.agreed() == [True, False]
    assert flags.agreed() is None
