"""``vertex_trainer_runtime.tracking`` (every variant's) against the REST stand-in of Vertex ML
Metadata: the chief's Experiment run gets the flags, each evaluation and the exported model's
metric; nothing else logs, and a failing API costs one warning line."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import subprocess
import sys

import pytest
from vertex_trainer_tools.experiments_stand_in import ExperimentsServer
from vertex_trainer_tools.replica_hooks import drill_hooks

from vertex_trainer_runtime import tracking

STORE = "projects/demo-project/locations/us-central1/metadataStores/default"
ARGS = argparse.Namespace(learning_rate=0.01, epochs=2, fp16=False, eval_data=None, tags=["a"])


@pytest.fixture(autouse=True)
def stand_in(monkeypatch):
    """The tracker sent to the stand-in that ``job_env`` names, as the drills' hooks send a
    trainer's (here in this process; the variable is restored after the test)."""
    start = drill_hooks.stand_in_endpoint(tracking.Tracker._start)
    monkeypatch.setattr(tracking.Tracker, "_start", start)
    monkeypatch.setenv(drill_hooks.ENDPOINT_ENV, "")


def job_env(url: str, run: str = "train-20260101-000000") -> dict[str, str]:
    """What ``vertex-tools submit`` puts into the job's env (full resource names); the stand-in
    at ``url`` for the test's tracker."""
    os.environ[drill_hooks.ENDPOINT_ENV] = url
    return {
        tracking.EXPERIMENT_ENV: f"{STORE}/contexts/my-runs",
        tracking.RUN_ENV: f"{STORE}/contexts/my-runs-{run}",
    }


def metadata_patches(server: ExperimentsServer, run_id: str) -> list[dict]:
    path = f"/v1/{STORE}/contexts/{run_id}"
    patches = [body for method, p, body in server.requests if (method, p) == ("PATCH", path)]
    return [body["metadata"] for body in patches]


def test_the_chief_logs_flags_each_evaluation_and_the_final_metric(monkeypatch):
    with ExperimentsServer(experiments=("my-runs",)) as server:
        for name, value in job_env(server.url).items():  # os.environ: the SDK reads it too
            monkeypatch.setenv(name, value)
        tracker = tracking.start(ARGS, is_chief=True)
        tracker.log_evaluation({"loss": 0.7, "accuracy": 0.5}, step=1)
        tracker.log_evaluation({"loss": 0.4, "accuracy": 0.75, "skipped": float("nan")}, step=2)
        tracker.finish({"accuracy": 0.75})
    assert tracker.enabled
    patches = metadata_patches(server, "my-runs-train-20260101-000000")
    params = {"learning_rate": 0.01, "epochs": 2, "fp16": "False", "eval_data": "", "tags": "['a']"}
    assert patches[0]["_params"] == params
    assert [p["_metrics"] for p in patches[1:3]] == [
        {"loss": 0.7, "accuracy": 0.5, "step": 1},
        {"loss": 0.4, "accuracy": 0.75, "step": 2},
    ]
    final = server.store.run("my-runs", "train-20260101-000000")
    assert final["_params"] == params
    assert final["_metrics"] == {"loss": 0.4, "accuracy": 0.75, "step": 2, "final_accuracy": 0.75}
    assert final["_state"] == "COMPLETE"


def test_a_restarted_chief_resumes_the_run_submit_created():
    with ExperimentsServer(experiments=("my-runs",)) as server:
        env = job_env(server.url)
        tracking.start(ARGS, is_chief=True, environ=env).log_evaluation({"accuracy": 0.5}, 1)
        creates = [r for r in server.requests if r[0] == "POST" and r[1].endswith("/contexts")]
        restarted = tracking.start(ARGS, is_chief=True, environ=env)
        restarted.finish({"accuracy": 0.6})
        again = [r for r in server.requests if r[0] == "POST" and r[1].endswith("/contexts")]
    assert restarted.enabled and len(again) == len(creates) == 1, "one run, resumed"
    run = server.store.run("my-runs", "train-20260101-000000")
    assert run["_metrics"] == {"accuracy": 0.5, "step": 1, "final_accuracy": 0.6}


def test_workers_send_nothing(caplog):
    with ExperimentsServer(experiments=("my-runs",)) as server:
        tracker = tracking.start(ARGS, environ=job_env(server.url), is_chief=False)
        tracker.log_evaluation({"accuracy": 0.5}, 1)
        tracker.finish({"accuracy": 0.5})
    assert not server.requests and not tracker.enabled


def test_a_tuning_trial_is_tracked_only_in_the_run_its_study_names(caplog):
    """Vertex names a trial no run (nothing is sent); make tune-local names one per trial."""
    caplog.set_level(logging.INFO, logger=tracking.__name__)
    with ExperimentsServer(experiments=("my-runs",)) as server:
        untracked = tracking.start(ARGS, is_chief=True, trial="3", environ={"CLOUD_ML_REGION": "x"})
        assert not untracked.enabled and not server.requests
        tracker = tracking.start(ARGS, environ=job_env(server.url), is_chief=True, trial="3")
        tracker.finish({"accuracy": 0.5})
    assert tracker.enabled and server.requests
    assert "Tuning trial 3: tracked in the run its study named" in caplog.text


def test_without_an_experiment_the_sdk_is_not_even_imported():
    code = (
        "import argparse, sys; from vertex_trainer_runtime import tracking; "
        "t = tracking.start(argparse.Namespace(epochs=1), is_chief=True, environ={}); "
        "t.log_evaluation({'accuracy': 1.0}, 1); t.finish({'accuracy': 1.0}); "
        "assert not t.enabled and 'google.cloud.aiplatform' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_api_failing_mid_run_costs_one_warning_line(caplog):
    caplog.set_level(logging.WARNING)
    with ExperimentsServer(experiments=("my-runs",)) as server:
        tracker = tracking.start(ARGS, is_chief=True, environ=job_env(server.url))
        server.refuse = 403
        tracker.log_evaluation({"accuracy": 0.5}, 1)
        tracker.log_evaluation({"accuracy": 0.6}, 2)
        tracker.finish({"accuracy": 0.6})
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith("Vertex AI Experiments: log_metrics failed, not tracking this run")
    assert [r[0] for r in server.requests].count("PATCH") == 2, "params, then the refused one"


def test_a_tensorboard_failure_stops_the_curves_not_the_run(caplog):
    """With a backing TensorBoard each evaluation is also a time series point; when that
    fails (one warning), the run's metrics go on."""

    class SDK:  # the SDK calls the tracker makes after start
        def __init__(self):
            self.metrics = []

        def log_metrics(self, values):
            self.metrics.append(values)

        def log_time_series_metrics(self, values, step):
            raise RuntimeError("tensorboard unreachable")

    caplog.set_level(logging.WARNING)
    tracker = tracking.Tracker("p", "us-central1", "my-runs", "run-1")
    tracker._aiplatform, tracker.time_series = SDK(), True
    tracker.log_evaluation({"accuracy": 0.5}, 1)
    tracker.log_evaluation({"accuracy": 0.6}, 2)
    assert tracker.enabled and not tracker.time_series
    assert tracker._aiplatform.metrics == [
        {"accuracy": 0.5, "step": 1},
        {"accuracy": 0.6, "step": 2},
    ]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "log_time_series_metrics failed, not calling log_time_series_metrics" in warning


@pytest.mark.parametrize("api", ["refusing", "unreachable"])
def test_a_failing_api_costs_one_warning_line_and_nothing_else(api, caplog, monkeypatch):
    from google.api_core import retry
    from google.cloud.aiplatform import base

    # The SDK retries an unreachable API for 120 s (base._DEFAULT_RETRY); 2 s show the same.
    monkeypatch.setattr(base, "_DEFAULT_RETRY", retry.Retry(timeout=2))
    caplog.set_level(logging.WARNING)
    with ExperimentsServer(refuse=403) as server:
        url = server.url
        if api == "refusing":
            tracker = tracking.start(ARGS, is_chief=True, environ=job_env(url))
    if api == "unreachable":  # the server is gone: nothing listens on its port
        tracker = tracking.start(ARGS, is_chief=True, environ=job_env(url))
    tracker.log_evaluation({"accuracy": 0.5}, 1)
    tracker.finish({"accuracy": 0.5})
    assert not tracker.enabled
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith("Vertex AI Experiments: start failed, not tracking this run")
    assert len(server.requests) == (1 if api == "refusing" else 0)


def test_plain_names_take_project_and_region_from_the_environment():
    env = {
        tracking.EXPERIMENT_ENV: "my-runs",
        tracking.RUN_ENV: "train-1",
        "CLOUD_ML_PROJECT_ID": "123",
        "CLOUD_ML_REGION": "europe-west4",
    }
    assert tracking.parse_names(env) == ("123", "europe-west4", "my-runs", "train-1")
    assert tracking.parse_names({tracking.EXPERIMENT_ENV: "my-runs"}) is None


def test_typed_flags_are_logged_by_flag_name():
    """A variant's ``Flags`` dataclass of sections gives the same params as a namespace."""
    from vertex_trainer_runtime import cli

    @dataclasses.dataclass(frozen=True)
    class Model:
        learning_rate: float = cli.flag(0.01, "step size")
        tags: list = cli.flag(("a",), "labels")

    @dataclasses.dataclass(frozen=True)
    class Flags:
        shared: cli.SharedFlags
        model: Model

    params = tracking.params_of(Flags(cli.SharedFlags(train_data="synthetic"), Model()))
    assert params["learning_rate"] == 0.01 and params["train_data"] == "synthetic"
    assert params["eval_data"] == "" and params["seed"] == 42 and params["tags"] == "('a',)"
    assert "shared" not in params and "model" not in params
