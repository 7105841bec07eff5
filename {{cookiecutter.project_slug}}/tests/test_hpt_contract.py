"""The hyperparameter study in vertex.yaml and the trainer agree, the way Vertex calls it:

- every parameter id is a flag the trainer accepts as ``--<id>=<value>`` (DISCRETE values
  arrive as floats such as ``32.0``), and the value reaches the parsed arguments;
- a short trial run with exactly those arguments, in a trial's environment, reports the
  study's metric id through cloudml-hypertune.

Framework-agnostic: the tiny-run flags come from the variant's tests/conftest.py, either a
``smoke_args`` fixture or a ``SMOKE_ARGS`` list: the flags that make a run train for a few
seconds (data flags included, or the built-in synthetic data is used).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import read_metrics

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:  # tools/ is not installed: it runs from the project root
    sys.path.insert(0, str(PROJECT))
config_lib = importlib.import_module("tools.config")
STUDY = config_lib.load(PROJECT / "vertex.yaml").hpt
DATA_ARGS = ["--train-data=synthetic", "--eval-data=synthetic"]


def trial_value(parameter) -> str:
    """A value inside the parameter's range, spelled the way Vertex sends it."""
    if parameter.type == "double":
        if parameter.scale == "linear":
            return repr((parameter.min + parameter.max) / 2)
        return repr(math.sqrt(parameter.min * parameter.max))  # geometric middle
    if parameter.type == "integer":
        return str(int(parameter.min))
    if parameter.type == "discrete":
        return repr(float(parameter.values[0]))  # e.g. "32.0"
    return str(parameter.values[0])


def trial_args() -> list[str]:
    return [f"--{p.id}={trial_value(p)}" for p in STUDY.parameters]


def smoke_args(request) -> list[str]:
    """The variant's tiny-run flags: its ``smoke_args`` fixture, else ``SMOKE_ARGS``.

    Both live in tests/conftest.py; the fixture form can build tiny assets (a model, CSVs).
    Data flags default to the built-in synthetic data when the list has none.
    """
    try:
        args = list(request.getfixturevalue("smoke_args"))
    except pytest.FixtureLookupError:
        args = None
        for plugin in request.config.pluginmanager.get_plugins():
            path = getattr(plugin, "__file__", "") or ""
            if Path(path).name == "conftest.py" and hasattr(plugin, "SMOKE_ARGS"):
                args = list(plugin.SMOKE_ARGS)
    if args is None:  # the parser test above still proves the parameters are flags
        pytest.skip(
            "tests/conftest.py provides no smoke_args fixture or SMOKE_ARGS list (the flags of "
            "a training run that takes a few seconds), so no trial is run"
        )
    return args if any(a.startswith("--train-data") for a in args) else DATA_ARGS + args


def test_every_parameter_is_a_flag_the_trainer_parses():
    from trainer import cli, train

    parser = cli.base_parser(train.DESCRIPTION)
    train.add_arguments(parser)
    args, unknown = parser.parse_known_args(cli.normalize_argv(trial_args()))
    assert unknown == [], f"the trainer does not accept {unknown}: rename the study parameter"
    for parameter in STUDY.parameters:
        parsed = getattr(args, parameter.id.replace("-", "_"))
        sent = trial_value(parameter)
        if parameter.type == "categorical":
            assert str(parsed) == sent
        else:
            assert float(parsed) == pytest.approx(float(sent)), parameter.id


@pytest.mark.slow
def test_a_short_trial_reports_the_study_metric(request, tmp_path):
    base = tmp_path / "hpt-run"
    metrics = tmp_path / "hypertune" / "output.metrics"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIP_", "CLOUD_ML_", "TF_CONFIG"))
    }
    env.update(
        # What Vertex gives trial 1 of a study: per-trial output dirs, the trial in CLUSTER_SPEC.
        AIP_MODEL_DIR=f"{base}/1/model/",
        AIP_CHECKPOINT_DIR=f"{base}/1/checkpoints/",
        AIP_TENSORBOARD_LOG_DIR=f"{base}/1/logs/",
        CLUSTER_SPEC=json.dumps(
            {
                "cluster": {"workerpool0": ["127.0.0.1:2222"]},
                "environment": "cloud",
                "task": {"type": "workerpool0", "index": 0, "trial": "1"},
            }
        ),
        CLOUD_ML_HP_METRIC_FILE=str(metrics),
        CLOUD_ML_TRIAL_ID="1",
    )
    argv = [sys.executable, "-m", "trainer.task", *smoke_args(request), *trial_args()]
    process = subprocess.Popen(
        argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()  # SIGKILL
        process.communicate()
        pytest.fail(f"the trial did not finish in 300 s: {' '.join(argv)}")
    assert process.returncode == 0, err[-3000:]
    assert "Ignoring arguments" not in err, "a study parameter is not a trainer flag"
    lines = read_metrics(metrics)
    assert lines, "the trial reported nothing to cloudml-hypertune"
    assert all(STUDY.metric_id in line for line in lines), (
        f"reported {sorted(lines[-1])}, the study's metric id is {STUDY.metric_id!r}"
    )
    assert math.isfinite(float(lines[-1][STUDY.metric_id]))
