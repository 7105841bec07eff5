"""``vertex_trainer_runtime.hptune`` (every variant's): metric reporting writes the file Vertex
reads, in cloudml-hypertune's format, chief only."""

from __future__ import annotations

from vertex_trainer_tools.testing import read_metrics

from vertex_trainer_runtime import hptune


def test_chief_reports_in_cloudml_hypertune_format(tmp_path, monkeypatch):
    metrics = tmp_path / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics))
    reporter = hptune.MetricReporter("accuracy")
    reporter.report(0.5, step=1)
    reporter.report(0.75, step=2)
    lines = read_metrics(metrics)
    assert [(line["accuracy"], line["global_step"]) for line in lines] == [
        ("0.5", "1"),
        ("0.75", "2"),
    ]
    assert set(lines[0]) == {"accuracy", "checkpoint_path", "global_step", "timestamp", "trial"}


def test_workers_do_not_report(tmp_path, monkeypatch):
    metrics = tmp_path / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics))
    hptune.MetricReporter("accuracy", enabled=False).report(0.9, step=1)
    assert not metrics.exists()


def test_non_finite_values_are_not_reported(tmp_path, monkeypatch):
    metrics = tmp_path / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics))
    reporter = hptune.MetricReporter("auc")
    reporter.report(float("nan"), step=1)
    reporter.report(0.8, step=2)
    assert [line["global_step"] for line in read_metrics(metrics)] == ["2"]
