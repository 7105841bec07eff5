"""``vertex_trainer_runtime.spec`` and ``.task``: a trainer's declaration is read as the tools read
it (imported, then its modules dropped from sys.modules), whatever its import style, and
``python -m trainer.task``'s exit codes come from the declared ``run``."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import textwrap

import pytest

from vertex_trainer_runtime import preemption, spec, task

FLAGS = '''
from __future__ import annotations

import dataclasses

from vertex_trainer_runtime import cli


@dataclasses.dataclass(frozen=True)
class Hyper:
    """hyperparameters"""

    steps: int | None = cli.flag(None, type=cli.positive_integer)
    outcome: str = cli.flag("done", choices=["done", "bad", "preempted"])


@dataclasses.dataclass(frozen=True)
class Flags:
    shared: cli.SharedFlags
    hyper: Hyper
'''
SPEC = """
from vertex_trainer_runtime.spec import FUNCTIONS, TrainerSpec

from demo_trainer.flags import Flags

# Every function is the run: only run is called here.
SPEC = TrainerSpec(
    Flags, "A demo.", "accuracy", "maximize", "model.bin", None,
    **dict.fromkeys(FUNCTIONS, "demo_trainer.train:run"),
)
"""
TRAIN = """
from vertex_trainer_runtime import cli, preemption


def run(flags, ctx):
    if flags.hyper.outcome == "bad":
        raise cli.InputError("bad input")
    if flags.hyper.outcome == "preempted":
        raise preemption.Preempted("checkpoint-3", 1.0)
    return None
"""


@pytest.fixture
def declared(tmp_path, monkeypatch):
    """The demo trainer's SPEC, its modules dropped from sys.modules as the tools drop them."""
    package = tmp_path / "demo_trainer"
    package.mkdir()
    for name, text in {"__init__": "", "flags": FLAGS, "spec": SPEC, "train": TRAIN}.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    declaration = importlib.import_module("demo_trainer.spec").SPEC
    for name in [name for name in sys.modules if name.startswith("demo_trainer")]:
        del sys.modules[name]
    yield declaration
    for name in [name for name in sys.modules if name.startswith("demo_trainer")]:
        del sys.modules[name]


def test_text_annotations_parse_after_the_modules_are_dropped(declared):
    assert spec.problems(declared) == []
    parsed = declared.parse(["--steps=3.0", "--seed=7"])
    assert parsed.hyper.steps == 3 and parsed.shared.seed == 7
    assert declared.parser().description == "A demo."
    assert declared.reported_metric(["--no-such-flag"]) == ("accuracy", "maximize")


def test_a_metric_that_follows_the_flags_parses_them(declared):
    following = dataclasses.replace(declared, metric_for=lambda f: (f.hyper.outcome, "minimize"))
    assert following.reported_metric(["--outcome=bad"]) == ("bad", "minimize")


def test_broken_declarations_are_named():
    assert spec.problems(object()) == [
        "trainer/spec.py: SPEC is not a vertex_trainer_runtime.spec.TrainerSpec"
    ]


def test_the_declaration_names_its_goal_and_functions(declared):
    broken = dataclasses.replace(declared, goal="max", export="demo_trainer.model.export")
    assert spec.problems(broken) == [
        "trainer/spec.py: goal 'max' is not one of maximize, minimize",
        "trainer/spec.py: export is not 'module:function'",
    ]
    assert spec.run_problems(declared) == []


@pytest.mark.parametrize(
    ("outcome", "code"), [("done", 0), ("bad", 2), ("preempted", preemption.EXIT_CODE)]
)
def test_main_maps_the_run_to_exit_codes(declared, tmp_path, capsys, outcome, code):
    argv = [f"--outcome={outcome}", f"--job-dir={tmp_path / 'job'}"]
    assert task.main(declared, argv) == code
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ERROR")]
    assert errors == (["ERROR: bad input"] if outcome == "bad" else [])
