"""Command-line parsing that tolerates the way Vertex AI calls a trainer.

Vertex hyperparameter tuning appends trial values as ``--<parameterId>=<value>``, so a study
parameter ``learning_rate`` arrives as ``--learning_rate=0.01`` and a DISCRETE integer as
``--batch_size=256.0``; Vertex may also inject flags this trainer does not know. This module
makes all of that parse the same as ``--learning-rate 0.01 --batch-size 256``.
"""

import argparse
import dataclasses
import logging
import math
import sys
import types
import typing
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
FlagsT = TypeVar("FlagsT")


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


def flag(default: Any = None, help: str | None = None, **argparse_options: Any) -> Any:
    """One flag of a section: a dataclass field whose ``--name`` argparse declares.

    ``argparse_options`` go to ``add_argument`` as they are (``type``, ``choices``, ``metavar``)
    plus ``aliases`` (other spellings) and ``negatable`` (a bool that also has ``--no-name``).
    Without ``type`` the field's annotation picks one: ``int`` -> :func:`integer`, ``float`` ->
    a finite number, ``bool`` -> a switch.
    """
    return dataclasses.field(default=default, metadata={"help": help, **argparse_options})


@dataclasses.dataclass(frozen=True)
class SharedFlags:
    """data, outputs and run (outputs default to the AIP_* variables, else --job-dir/...)"""

    train_data: str | None = flag(
        help="training data: 'synthetic', a local path, a gs:// URI or a /gcs/ path"
    )
    eval_data: str | None = flag(help="evaluation data, same forms as --train-data")
    model_dir: str | None = flag(help="where the exported model goes (AIP_MODEL_DIR)")
    checkpoint_dir: str | None = flag(help="where checkpoints go (AIP_CHECKPOINT_DIR)")
    job_dir: str | None = flag(
        help="base dir whose model/, checkpoints/ and logs/ subfolders are used when the "
        "AIP_* variables are not set (else ./outputs)"
    )
    seed: int = flag(42, "random seed")
    checkpoint_minutes: float = flag(
        10.0,
        "also checkpoint at least this often, in minutes (0: only at the regular interval)",
        type=non_negative_float,
    )


@dataclasses.dataclass(frozen=True)
class TensorBoardFlags:
    """TensorBoard"""

    tensorboard_dir: str | None = flag(help="where TensorBoard logs go (AIP_TENSORBOARD_LOG_DIR)")


def _annotation_type(annotation: Any) -> Any:
    """``int | None`` -> ``int``: the type a flag's value is parsed as."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else str
    return annotation


_PARSED_AS: dict[Any, Callable[[str], Any]] = {int: integer, float: _finite, str: str}


# A dataclass's annotations as types, resolved once: a module written with ``from __future__ import
# annotations`` has text ones, which resolve only while it is in sys.modules (the tools read a
# trainer's declaration, then drop its modules).
_HINTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def resolve_annotations(flags_class: type) -> None:
    """Resolve a ``Flags`` dataclass's and its sections' annotations now (a declaration does)."""
    for section in sections(flags_class).values():
        if dataclasses.is_dataclass(section):
            _hints(section)


def add_section(parser: argparse.ArgumentParser, section: type) -> None:
    """Declare a flags dataclass's fields as one argparse group titled by its docstring."""
    title = (section.__doc__ or section.__name__).strip().splitlines()[0]
    group = parser.add_argument_group(title)
    hints = _hints(section)
    for field in dataclasses.fields(section):
        options = dict(field.metadata)
        names = [f"--{field.name.replace('_', '-')}", *options.pop("aliases", ())]
        kind = _annotation_type(hints[field.name])
        if field.default is dataclasses.MISSING:
            options["required"] = True
        else:
            options.setdefault("default", field.default)
        if kind is bool:
            negatable = options.pop("negatable", False) or field.default is True
            options["action"] = argparse.BooleanOptionalAction if negatable else "store_true"
        elif "choices" not in options or "type" in options:
            options.setdefault("type", _PARSED_AS.get(kind, kind))
        group.add_argument(*names, dest=field.name, **options)


def sections(flags_class: type) -> dict[str, type]:
    """The sections of a variant's ``Flags`` dataclass: field name -> section dataclass."""
    hints = _hints(flags_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(flags_class)}


def parser_for(flags_class: type, description: str) -> argparse.ArgumentParser:
    """The whole command line of a ``Flags`` dataclass of sections (shared ones first)."""
    # allow_abbrev=False: an injected unknown flag such as --job must never match --job-dir.
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task",
        description=description,
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for section in sections(flags_class).values():
        add_section(parser, section)
    return parser


def flags_from(flags_class: type[FlagsT], args: argparse.Namespace) -> FlagsT:
    """Typed flags from parsed ``args``: each section takes its fields' values."""
    values = vars(args)

    def read(section: type) -> Any:
        return section(**{field.name: values[field.name] for field in dataclasses.fields(section)})

    return flags_class(**{name: read(section) for name, section in sections(flags_class).items()})


def parse(flags_class: type[FlagsT], description: str, argv: Sequence[str] | None = None) -> FlagsT:
    """Vertex-style ``argv`` parsed into a ``Flags`` dataclass of sections."""
    return flags_from(flags_class, parse_args(parser_for(flags_class, description), argv))


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None):
    """Parse Vertex-style argv; unknown flags are logged and ignored, never fatal."""
    if argv is None:
        argv = sys.argv[1:]
    args, unknown = parser.parse_known_args(normalize_argv(argv))
    if unknown:
        logger.warning("Ignoring arguments this trainer does not know: %s", " ".join(unknown))
    return args
