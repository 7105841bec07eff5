"""The Experiments stand-in answers the SDK's own experiment tracking as Vertex ML Metadata does:
a run made, resumed, given params and metrics, ended; what ``experiment_run`` reads back."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform

from vertex_trainer_tools.experiments_stand_in import ExperimentsServer, TrackedRun


@pytest.fixture(autouse=True)
def sdk_state(monkeypatch):
    """The SDK's global settings (endpoint, experiment) as other tests left them, afterwards."""
    from google.cloud.aiplatform import initializer, metadata

    config = initializer.global_config
    for name in ("_project", "_location", "_credentials", "_api_endpoint", "_api_transport"):
        monkeypatch.setattr(config, name, getattr(config, name))
    yield
    metadata.metadata._experiment_tracker.reset()


def test_the_sdk_tracks_a_run_that_the_stand_in_reads_back():
    with ExperimentsServer(experiments=("tests",)) as server:
        run = TrackedRun(server)
        aiplatform.init(
            project="demo-project",
            location="us-central1",
            credentials=AnonymousCredentials(),
            api_endpoint=server.url,
            api_transport="rest",
            experiment="tests",
            experiment_tensorboard=False,
        )
        with pytest.raises(exceptions.NotFound):
            aiplatform.start_run("run-1", resume=True)
        aiplatform.start_run("run-1")
        with pytest.raises(exceptions.Conflict):
            aiplatform.ExperimentRun.create("run-1", experiment="tests")
        aiplatform.log_params({"epochs": 2, "model": "cnn"})
        aiplatform.log_metrics({"accuracy": 0.5, "step": 1})
        aiplatform.log_metrics({"accuracy": 0.5, "step": 1})  # the same again: one evaluation
        aiplatform.log_metrics({"accuracy": 0.75, "step": 2})
        aiplatform.end_run()
        aiplatform.start_run("run-1", resume=True)  # a restart finds it
        aiplatform.log_metrics({"final_accuracy": 0.75})
        aiplatform.end_run()
    logged = run.logged()
    assert logged["_params"] == {"epochs": 2, "model": "cnn"}
    assert logged["_metrics"] == {"accuracy": 0.75, "step": 2, "final_accuracy": 0.75}
    assert logged["_state"] == "COMPLETE"
    assert run.evaluations() == [{"accuracy": 0.5, "step": 1}, {"accuracy": 0.75, "step": 2}]
    assert run.env["AIP_EXPERIMENT_RUN_NAME"].endswith("/contexts/tests-run-1")
