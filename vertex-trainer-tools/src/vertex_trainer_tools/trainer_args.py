"""What the trainer will parse, run through the trainer's own parser before any job starts.

Vertex starts ``python -m trainer.task`` with ``job.args``, the extra ``ARGS`` of ``make submit``
and, in a study, ``--<parameter id>=<value>`` per trial. A value the trainer's parser refuses
(``--epochs=abc``, a study's ``max_depth`` of 0.5) ends that replica or trial at argument
parsing, after its VMs started. So ``vertex-tools check`` and every submit parse the same
arguments with the parser of the project's framework-free declaration, ``trainer/spec.py`` (its
types and ranges, e.g. ``cli.positive_integer``), and report argparse's own message, without its
usage text.

A study parameter is checked at what Vertex can draw: a double's min, max and a fractional value
between them, an integer's min and max, each discrete or categorical value, formatted as Vertex
passes them (a discrete 256 arrives as ``--batch_size=256.0``).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import Any

HELP_FLAGS = ("-h", "--help")


class _Refused(Exception):
    """The trainer's parser called ``error()`` (or ``exit()``): it would stop the trainer."""


@dataclass(frozen=True)
class Trainer:
    """The project's declaration (``trainer.spec.SPEC``, a ``TrainerSpec``) and the runtime's
    ``vertex_trainer_runtime.cli`` (imported by ``preflight``)."""

    spec: Any
    cli: ModuleType

    def normalize(self, argv: Sequence[str]) -> list[str]:
        """The trainer's own spelling of its argv (``--max_depth`` is ``--max-depth``)."""
        return list(getattr(self.cli, "normalize_argv", list)(list(argv)))

    @cached_property
    def parser(self):
        """The trainer's parser, whose errors raise instead of printing usage and exiting
        (parsing leaves a parser as it was: one serves every check)."""
        parser = self.spec.parser()

        def error(message: str):
            raise _Refused(message)

        def leave(status: int = 0, message: str | None = None):
            raise _Refused(message or "the trainer would print its help and exit, training nothing")

        parser.error, parser.exit = error, leave
        return parser

    def refusal(self, argv: Sequence[str]) -> tuple[str | None, list[str]]:
        """``(why the parser refuses argv, None if it does not; the arguments it leaves over)``."""
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                _, unknown = self.parser.parse_known_args(self.normalize(argv))
            except _Refused as refused:
                return _short(str(refused)), []
        return None, list(unknown)

    @cached_property
    def flags_taking_values(self) -> dict[str, bool]:
        """``--flag`` (hyphenated) -> whether it takes a value."""
        return {
            option: action.nargs != 0
            for action in self.parser._actions  # argparse has no public list of them
            for option in action.option_strings
            if option.startswith("--")
        }


def _short(message: str) -> str:
    """argparse's message less its ``argument --x: `` prefix: the line names the argument."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.startswith("argument ") else message


def _is_option(token: str) -> bool:
    """``--x``/``-x`` start an option; ``-3`` is a value (the trainer has no numeric options)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def groups(argv: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """Each option with the values after it (``--epochs 3`` is one), at the option's index; a
    value before any option, or after ``--x=1``, starts a group of its own."""
    current: tuple[int, list[str]] | None = None
    for index, token in enumerate(argv):
        if current is None or _is_option(token) or "=" in current[1][0]:
            if current is not None:
                yield current
            current = (index, [token])
        else:
            current[1].append(token)
    if current is not None:
        yield current


def _flag_name(token: str) -> str:
    return token.partition("=")[0].replace("_", "-")


def argument_problems(trainer: Trainer, argv: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(index, argument, why)`` for each argument the trainer's parser would refuse or leave
    over (a stray value). Flags the trainer lacks are ``preflight.args_problems``'s to report."""
    known = trainer.flags_taking_values
    found = []
    for index, group in groups(argv):
        shown = " ".join(group)
        if group[0] == "--":
            found.append((index, shown, "'--' ends the trainer's options: what follows is ignored"))
            continue
        if _is_option(group[0]) and group[0] not in HELP_FLAGS:
            if not group[0].startswith("--"):
                why = "the trainer has --flags only: it would ignore this one"
                found.append((index, shown, why))
                continue
            if _flag_name(group[0]) not in known:
                continue  # a flag the trainer lacks: preflight reports it with close matches
        why, unknown = trainer.refusal(group)
        if why is None:
            stray = [token for token in unknown if not _is_option(token)]
            if stray:
                why = f"{stray[0]!r} is no flag and no flag's value: the trainer would ignore it"
                if _is_option(group[0]) and not known.get(_flag_name(group[0]), True):
                    why += f" ({group[0]} takes no value)"
        if why is not None:
            found.append((index, shown, why))
    return found


def _vertex_text(kind: str, value) -> str:
    """A value as Vertex passes it: integers as ``3``, doubles and discrete values as
    ``0.01``/``256.0``, categorical values as they are."""
    if kind == "integer":
        return str(int(value))
    if kind in ("double", "discrete"):
        return repr(float(value))
    return str(value)


def _fractional_between(low: float, high: float) -> float | None:
    """A value of (low, high) with a fraction, as a double parameter draws; None if none found."""
    for share in (0.382, 0.618, 0.5, 0.25):
        value = round(low + (high - low) * share, 6)
        if low < value < high and value != int(value):
            return value
    return None


def parameter_problem(trainer: Trainer, parameter) -> tuple[str, str] | None:
    """``(key under the parameter, why)`` for the first value the study would pass that the
    trainer's parser refuses; None when every value it can draw parses."""
    flag = f"--{parameter.id}"

    def refused(value) -> tuple[str, str | None]:
        text = _vertex_text(parameter.type, value)
        return text, trainer.refusal([f"{flag}={text}"])[0]

    if parameter.type in ("double", "integer"):
        drawn = ["min", "max"]
        between = _fractional_between(parameter.min, parameter.max)
        if parameter.type == "double" and between is not None:
            text, why = refused(between)
            around = (math.floor(between), math.ceil(between))
            if why and all(trainer.refusal([f"{flag}={n}"])[0] is None for n in around):
                # the integers on either side parse, the fraction between them does not
                return (
                    "type",
                    f"double draws fractions such as {flag}={text}, which the trainer refuses "
                    f"({why}): use type: integer (or discrete)",
                )
            drawn.append("")
        for key in drawn:
            text, why = refused(getattr(parameter, key) if key else between)
            if why:
                return key, f"Vertex would pass {flag}={text} and the trainer refuses it: {why}"
        return None
    for value in parameter.values:
        text, why = refused(value)
        if why:
            return "values", f"Vertex would pass {flag}={text} and the trainer refuses it: {why}"
    return None
