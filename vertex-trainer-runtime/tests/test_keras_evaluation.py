"""``vertex_trainer_runtime.keras.evaluation`` and the callbacks' order of ``keras.run``: the
chief reports each epoch's metric and adds val_* to the logs; a notice stops an evaluation, but
not the last epoch's (the export needs it); the checkpoint comes before the evaluation, which
comes before TensorBoard (run in a Keras project's env)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("keras")
keras = pytest.importorskip("tf_keras")

from vertex_trainer_runtime.keras import evaluation, run  # noqa: E402


class Reporter:
    def __init__(self):
        self.reported = []

    def report(self, value, step):
        self.reported.append((value, step))


def evaluate_callback(notice=None, epochs: int = 3, enabled: bool = True):
    def evaluate(stop):
        if stop is not None and stop():
            return None
        return {"loss": 0.5, "accuracy": 0.75}

    reporter = Reporter()
    callback = evaluation.Evaluate(evaluate, "accuracy", reporter, enabled, epochs, notice)
    return callback, reporter


def test_the_chief_reports_each_epoch_and_fills_the_logs():
    callback, reporter = evaluate_callback()
    logs = {}
    callback.on_epoch_end(0, logs)
    assert reporter.reported == [(0.75, 1)]
    assert logs == {"val_loss": 0.5, "val_accuracy": 0.75}
    assert callback.results == {"loss": 0.5, "accuracy": 0.75}

    other, reported = evaluate_callback(enabled=False)  # another task evaluates nothing
    other.on_epoch_end(0, {})
    assert reported.reported == [] and other.results == {}


def test_a_notice_stops_an_evaluation_but_not_the_last_one():
    notice = SimpleNamespace(stopping=False, received=True)
    callback, reporter = evaluate_callback(notice, epochs=2)
    callback.on_epoch_end(0, {})
    assert reporter.reported == []
    callback.on_epoch_end(1, {})
    assert reporter.reported == [(0.75, 2)]


def test_the_checkpoint_is_saved_before_the_evaluation_and_tensorboard_writes_last(tmp_path):
    speed, checkpointing, evaluate = object(), object(), object()
    board = SimpleNamespace(uri=str(tmp_path))
    for is_chief in (True, False):
        ctx = SimpleNamespace(cluster=SimpleNamespace(is_chief=is_chief), tensorboard_dir=board)
        callbacks = run._callbacks(checkpointing, evaluate, speed, ctx)
        assert callbacks[:3] == [speed, checkpointing, evaluate]
        assert [type(c) for c in callbacks[3:]] == (
            [keras.callbacks.TensorBoard] if is_chief else []
        )
