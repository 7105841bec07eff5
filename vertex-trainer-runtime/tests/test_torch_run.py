"""vertex_trainer_runtime.torch.run and .reporting: the parts of a PyTorch run's fixed order that
need no training (the trainings themselves: the PyTorch variant's tests)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vertex_trainer_runtime.spec import FUNCTIONS, TrainerSpec  # noqa: E402
from vertex_trainer_runtime.torch import reporting  # noqa: E402
from vertex_trainer_runtime.torch import run as torch_run  # noqa: E402


class Reporter:
    """A MetricReporter that keeps what it was given."""

    tag = "accuracy"

    def __init__(self):
        self.reported = []

    def report(self, value, step):
        self.reported.append((value, step))


class FakeTrainer:
    def __init__(self, step: int, log_history: list[dict]):
        self.state = SimpleNamespace(global_step=step, log_history=log_history)
        self.evaluations = 0

    def evaluate(self):
        self.evaluations += 1


def test_the_last_measurement_is_the_final_models():
    """No evaluation at the last step: the final model is evaluated (which reports it)."""
    report = reporting.ReportMetric(Reporter())
    trainer = FakeTrainer(10, [{"eval_accuracy": 0.5, "step": 8}])
    reporting.report_final_model(trainer, report)
    assert trainer.evaluations == 1 and report.reporter.reported == []


def test_a_measured_last_step_is_reported_again_only_after_a_resume():
    """Resumed from the final checkpoint, the earlier attempt's value of the last step is
    reported again; measured in this run, it is not reported twice."""
    history = [{"eval_accuracy": 0.75, "step": 10}]
    report = reporting.ReportMetric(Reporter())
    reporting.report_final_model(FakeTrainer(10, history), report)
    assert report.reporter.reported == [(0.75, 10)] and report.last_value == 0.75

    reporting.report_final_model(FakeTrainer(10, history), report)
    assert report.reporter.reported == [(0.75, 10)]


def test_evaluation_gets_class_ids_not_logits():
    logits = torch.tensor([[0.1, 0.9], [2.0, -1.0]])
    assert torch_run.class_ids(logits, None).tolist() == [1, 0]
    assert torch_run.class_ids((logits, "hidden states"), None).tolist() == [1, 0]


def test_an_optional_function_left_out_is_a_lookup_error():
    """The run asks for ``worker_flags`` only where it is declared."""
    spec = TrainerSpec(
        SimpleNamespace,
        "d",
        "accuracy",
        "maximize",
        "config.json",
        None,
        **dict.fromkeys(FUNCTIONS, "vertex_trainer_runtime.torch.run:run"),
        training_arguments="vertex_trainer_runtime.torch.run:restore",
    )
    assert spec.function("training_arguments") is torch_run.restore
    assert spec.worker_flags is None
    with pytest.raises(LookupError, match="worker_flags"):
        spec.function("worker_flags")
