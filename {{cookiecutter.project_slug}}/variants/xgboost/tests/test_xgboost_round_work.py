"""What the trainer asks of the booster while it boosts, counted (not timed): on a GPU each such
call can make the host wait for the device, so it must stay out of the plain rounds.

A plain round reads nothing but the round count; a report round scores the eval set through
XGBoost's prediction cache (the same matrix every time, never a full ``predict``); a checkpoint
round serializes the booster once. On a GPU, checkpoints go by time, not every 50 rounds.
"""

from __future__ import annotations

import pytest
import xgboost as xgb
from conftest import FAST, check_ok
from vertex_trainer_tools.trainer_runs import run_in_process

from trainer import model

# The booster's methods that read the model or the device, beyond the round count.
WATCHED = ["predict", "inplace_predict", "eval_set", "save_raw", "save_model", "save_config"]
WATCHED += ["load_config", "load_model", "set_param", "attr", "set_attr", "copy", "get_dump"]
ROUNDS = ["--train-data=synthetic:600", "--eval-data=synthetic:200", "--num-boost-round=120"]


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, int, tuple]]:
    """(method, rounds done, the eval matrices' ids) of every watched call inside ``xgb.train``."""
    recorded, boosting = [], []
    rounds = xgb.Booster.num_boosted_rounds

    def watch(name: str):
        method = getattr(xgb.Booster, name)

        def watched(self, *args, **kwargs):
            if boosting:
                evals = args[0] if name == "eval_set" and args else ()
                recorded.append((name, rounds(self), tuple(id(m) for m, _ in evals)))
            return method(self, *args, **kwargs)

        monkeypatch.setattr(xgb.Booster, name, watched)

    for name in WATCHED:
        watch(name)
    train = xgb.train

    def watched_train(*args, **kwargs):
        boosting.append(True)
        try:
            return train(*args, **kwargs)
        finally:
            boosting.clear()

    monkeypatch.setattr(xgb, "train", watched_train)
    return recorded


def test_plain_rounds_read_nothing_and_reports_read_the_prediction_cache(
    calls, tmp_path, monkeypatch
):
    args = [*ROUNDS, "--report-rounds=10", "--checkpoint-rounds=40", f"--job-dir={tmp_path}"]
    check_ok(run_in_process([*args, *FAST], monkeypatch))
    after_round_one = [call for call in calls if call[1] >= 1]
    # XGBoost's own per-round eval_set([]) (no matrix: nothing predicted) aside.
    scored = [(r, matrices) for name, r, matrices in after_round_one if name == "eval_set"]
    work = [(name, r) for name, r, matrices in after_round_one if name != "eval_set" or matrices]
    assert [r for r, matrices in scored if matrices] == list(range(10, 121, 10))
    # One matrix, the same object every report: XGBoost's cache adds only the new trees.
    assert len({matrices for _, matrices in scored if matrices}) == 1
    assert all(len(matrices) == 1 for _, matrices in scored if matrices)
    saves = [(name, r) for name, r in work if name != "eval_set"]
    assert saves == [("save_raw", 40), ("save_raw", 80), ("save_raw", 120)]


@pytest.mark.parametrize(
    ("device", "saved"), [("cpu", [50, 100, 120]), ("cuda", [120])], ids=["cpu", "cuda"]
)
def test_default_checkpoints_are_every_50_rounds_on_the_cpu_and_by_time_on_a_gpu(
    calls, tmp_path, monkeypatch, device, saved
):
    """Default flags: a save every 50 rounds on the CPU; on a GPU only the final one within
    --checkpoint-minutes (the cuda run trains on the CPU here: only the trainer's choice of
    device is the GPU's)."""
    params = model.params
    monkeypatch.setattr(model, "device", lambda flag: device)
    monkeypatch.setattr(model, "params", lambda *a: {**params(*a), "device": "cpu"})
    result = run_in_process([*ROUNDS, f"--job-dir={tmp_path}", *FAST], monkeypatch)
    check_ok(result)
    assert [r for name, r, _ in calls if name == "save_raw"] == saved
    assert ("On the GPU: a checkpoint every 10 minutes" in result.stderr) == (device == "cuda")
