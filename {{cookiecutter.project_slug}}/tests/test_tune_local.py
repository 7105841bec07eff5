"""``make tune-local`` on this project's own trainer: a grid study trains each point of the grid
once, with the values Vertex would pass, and reads each trial's metric back; trials that fail
stop the study at ``max_failed_trial_count``, in one line. (The vertex-trainer-tools suite
checks the rest of the study with a stand-in trainer: early stopping, a study killed and
resumed, the Bayesian search.)"""

from __future__ import annotations

import math

import pytest
from conftest import SMOKE_ARGS
from vertex_trainer_tools import config

pytestmark = pytest.mark.slow


def two_point_grid(study) -> tuple[str, dict]:
    """The study's first parameter with listed or whole values, cut to two of them."""
    for parameter in study.parameters:
        if parameter.type in ("discrete", "categorical"):
            values = list(parameter.values[:2])
            return parameter.id, {"type": parameter.type, "values": values}
        if parameter.type == "integer":
            low = int(parameter.min)
            return parameter.id, {"type": "integer", "min": low, "max": low + 1}
    pytest.skip("the study has no parameter a grid can take (discrete, categorical, integer)")


def test_a_grid_study_trains_every_point_once(local_study, vertex_project):
    study = config.load(vertex_project / "vertex.yaml").hpt
    name, grid = two_point_grid(study)
    done = local_study(SMOKE_ARGS, trials=8, parallel=2, algorithm="grid", parameters={name: grid})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    trials = sorted(done.journal.trials.values(), key=lambda trial: trial.id)
    assert len(trials) == 2, done.stdout[-4000:]
    assert len({trial.values[name] for trial in trials}) == 2
    for trial in trials:
        assert trial.state == "SUCCEEDED" and trial.measurements, trial
        assert math.isfinite(trial.final)
        log = (done.folder / "trials" / str(trial.id) / "log.txt").read_text()
        assert f"--{name}={trial.values[name]}" in log  # appended as Vertex appends it
    assert (done.folder / "best.json").is_file() and (done.folder / "study.png").is_file()


def test_failed_trials_stop_the_study_in_one_line(local_study, tmp_path):
    missing = tmp_path / "no-such-data.csv"
    args = [*SMOKE_ARGS, f"--train-data={missing}"]
    done = local_study(args, trials=4, parallel=1, max_failed_trial_count=1)
    assert done.returncode == 1, done.stdout[-4000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, done.stderr
    assert "the study stopped after 1 failed trial: hpt.max_failed_trial_count is 1" in errors[0]
    (trial,) = done.journal.trials.values()
    assert trial.state == "FAILED" and "ERROR: " in trial.why  # the trainer's refusal
