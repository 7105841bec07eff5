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

import math
from pathlib import Path

import pytest
from vertex_trainer_tools import config as config_lib

PROJECT = Path(__file__).resolve().parent.parent
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
    from trainer import cli, flags

    parser = flags.parser()
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
def test_a_short_trial_reports_the_study_metric(request, tmp_path, hpt_trial):
    # The emulator runs the job as trial 1: the study's --<id>=<value> arguments appended.
    job = hpt_trial(tmp_path / "job", smoke_args(request), trial=1)
    assert job.returncode == 0, job.tail()
    assert not any("Ignoring arguments" in line for line in job.lines()), job.tail()
    lines = job.metrics()
    assert lines, "the trial reported nothing to cloudml-hypertune"
    assert all(STUDY.metric_id in line for line in lines), (
        f"reported {sorted(lines[-1])}, the study's metric id is {STUDY.metric_id!r}"
    )
    assert math.isfinite(float(lines[-1][STUDY.metric_id]))
