"""``vertex_trainer_runtime.cli`` (the flags every variant shares): flags parse the same whether a
person or Vertex hyperparameter tuning writes them."""

from __future__ import annotations

import argparse
import dataclasses
import logging

import pytest

from vertex_trainer_runtime import cli


@dataclasses.dataclass(frozen=True)
class Hyper:
    """hyperparameters"""

    learning_rate: float = cli.flag(0.1, "step size", type=cli.positive_float)
    batch_size: int = cli.flag(8, "examples per step", type=cli.positive_integer)


@dataclasses.dataclass(frozen=True)
class Flags:
    shared: cli.SharedFlags
    hyper: Hyper


def parser() -> argparse.ArgumentParser:
    return cli.parser_for(Flags, "test")


def test_defaults():
    args = cli.parse_args(parser(), [])
    assert args.seed == 42 and args.checkpoint_minutes == 10.0
    assert args.train_data is None and args.job_dir is None


def test_vertex_trial_form_matches_the_human_form():
    vertex = cli.parse_args(parser(), ["--learning_rate=0.01", "--batch_size=256.0"])
    human = cli.parse_args(parser(), ["--learning-rate", "0.01", "--batch-size", "256"])
    assert vars(vertex) == vars(human)
    assert vertex.batch_size == 256 and isinstance(vertex.batch_size, int)


def test_values_keep_their_underscores():
    args = cli.parse_args(parser(), ["--train_data=gs://my_bucket/train_data/", "--job-dir", "a_b"])
    assert args.train_data == "gs://my_bucket/train_data/"
    assert args.job_dir == "a_b"


def test_unknown_flags_are_warned_and_ignored(caplog):
    with caplog.at_level(logging.WARNING):
        args = cli.parse_args(parser(), ["--epochs_unknown=3", "--batch-size=4", "--job", "{}"])
    assert args.batch_size == 4
    assert "--epochs-unknown=3" in caplog.text and "--job" in caplog.text


def test_unknown_prefix_never_abbreviates_a_known_flag():
    # argparse would otherwise read Vertex's --job as --job-dir.
    args = cli.parse_args(parser(), ["--job=x"])
    assert args.job_dir is None


@pytest.mark.parametrize("value, expected", [("3", 3), ("256.0", 256), ("-2", -2), ("1e3", 1000)])
def test_integer_accepts_integral_floats(value, expected):
    assert cli.integer(value) == expected


@pytest.mark.parametrize("value", ["2.5", "abc", "nan", "inf", ""])
def test_integer_rejects_non_integers(value):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.integer(value)


def test_bad_value_is_a_one_line_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(parser(), ["--batch_size=2.5"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--batch-size" in error and "expected an integer" in error


@pytest.mark.parametrize("value", ["0", "-1"])
def test_positive_integer(value):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.positive_integer(value)


def test_float_types():
    assert cli.non_negative_float("0") == 0.0
    assert cli.positive_float("1e-5") == 1e-5
    for bad in ("-1", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.non_negative_float(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        cli.positive_float("0")


def test_fraction_and_non_negative_integer():
    assert cli.fraction("1") == 1.0 and cli.fraction("0.25") == 0.25
    assert cli.non_negative_integer("0") == 0 and cli.non_negative_integer("6.0") == 6
    for bad in ("0", "1.5", "-0.1", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.fraction(bad)
    for bad in ("-1", "2.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.non_negative_integer(bad)
