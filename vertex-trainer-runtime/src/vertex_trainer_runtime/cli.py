"""Command-line parsing that tolerates the way Vertex AI calls a trainer.

Vertex hyperparameter tuning appends trial values as ``--<parameterId>=<value>``, so a study
parameter ``learning_rate`` arrives as ``--learning_rate=0.01`` and a DISCRETE integer as
``--batch_size=256.0``; Vertex may also inject flags this trainer does not know. This module
makes all of that parse the same as ``--learning-rate 0.01 --batch-size 256``.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Sequence

logger = logging.getLogger(__name__)


class InputError(ValueError):
    """Bad input (a flag value, a data file): the run ends with one ``ERROR:`` line, exit 2.

    Raise it before anything is written to the model dir.
    """


def integer(value: str) -> int:
    """An ``int`` argparse type that also accepts integral floats such as ``256.0``."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}")
    return int(number)


def positive_integer(value: str) -> int:
    number = integer(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return number


def non_negative_integer(value: str) -> int:
    number = integer(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value!r}")
    return number


def _finite(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}")
    return number


def non_negative_float(value: str) -> float:
    number = _finite(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number


def positive_float(value: str) -> float:
    number = _finite(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def fraction(value: str) -> float:
    """A share of something, in (0, 1]."""
    number = positive_float(value)
    if number > 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}")
    return number


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Spell every long option with hyphens: ``--learning_rate=1`` -> ``--learning-rate=1``.

    Only the option name changes; values (paths, ``gs://`` URIs) are left untouched.
    """
    normalized = []
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            name, sep, value = token.partition("=")
            token = name.replace("_", "-") + sep + value
        normalized.append(token)
    return normalized


def base_parser(description: str) -> argparse.ArgumentParser:
    """The flags every variant shares: data, Vertex output dirs, seed, project, checkpoints."""
    # allow_abbrev=False: an injected unknown flag such as --job must never match --job-dir.
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task",
        description=description,
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--train-data",
        default=None,
        help="training data: 'synthetic', a local path, a gs:// URI or a /gcs/ path",
    )
    data.add_argument(
        "--eval-data",
        default=None,
        help="evaluation data, same forms as --train-data",
    )
    outputs = parser.add_argument_group(
        "outputs (default: AIP_* variables set by Vertex, else --job-dir, else ./outputs)"
    )
    outputs.add_argument("--model-dir", default=None, help="where the exported model goes")
    outputs.add_argument("--checkpoint-dir", default=None, help="where checkpoints go")
    outputs.add_argument(
        "--job-dir",
        default=None,
        help="base dir whose model/, checkpoints/ and logs/ subfolders are used when the "
        "AIP_* variables are not set",
    )
    run = parser.add_argument_group("run")
    run.add_argument("--seed", type=integer, default=42, help="random seed")
    run.add_argument(
        "--checkpoint-minutes",
        type=non_negative_float,
        default=10.0,
        help="also checkpoint at least this often, in minutes (0: only at the regular interval)",
    )
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None):
    """Parse Vertex-style argv; unknown flags are logged and ignored, never fatal."""
    if argv is None:
        argv = sys.argv[1:]
    args, unknown = parser.parse_known_args(normalize_argv(argv))
    if unknown:
        logger.warning("Ignoring arguments this trainer does not know: %s", " ".join(unknown))
    return args
