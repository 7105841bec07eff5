"""vertex.yaml's reader: pydantic models in, located problems out.

The models (``Model``: frozen, no unknown keys) are the schema: each field's type and
``Field(...)`` say what the YAML value must be (``examples`` shows as "(e.g. ...)",
``description`` names what a ``pattern`` describes), and each model's ``problems()`` adds its
cross-field rules. ``read(cls, data, path)`` turns every pydantic error into one line,
``<file>:<line>: <key>: <why> (e.g. <example>)``, and raises ``ToolError`` with all of them.
``load_yaml`` (``yaml_lines.py``) keeps line numbers and rejects duplicate keys, which plain
``yaml.safe_load`` silently resolves to the last one.
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.yaml_lines import (  # noqa: F401 (schema.load_yaml, ... for callers)
    LineDict,
    LineList,
    StrictLoader,
    join,
    load_yaml,
)


def close_matches(name: str, choices, n: int = 3) -> str:
    """`` (did you mean 'a' or 'b'?)`` or nothing."""
    matches = difflib.get_close_matches(str(name), sorted(map(str, choices)), n=n, cutoff=0.6)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"


def key_parts(key: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", key)]


def line_of(root: Any, key: str) -> int:
    """The line of ``key`` (``job.worker_pools[0].x``), or of its closest existing parent."""
    line, node = getattr(root, "line", 0), root
    for part in key_parts(key):
        if isinstance(node, LineDict) and part in node:
            line, node = node.lines.get(part, line), node[part]
        elif isinstance(node, LineList) and isinstance(part, int) and part < len(node):
            line, node = node.lines[part], node[part]
        else:
            break
    return line


class Reader:
    """Collects every problem of one document instead of stopping at the first one."""

    def __init__(self, root: Any, path: str):
        self.root = root
        self.path = path
        self.problems: list[str] = []
        self._keys: set[str] = set()

    def problem(self, key: str, why: str) -> None:
        """Record one problem; a key gets one line (the first thing wrong with it)."""
        if key in self._keys:
            return
        self._keys.add(key)
        line = line_of(self.root, key)
        where = f"{self.path}:{line}" if line else self.path
        self.problems.append(f"{where}: {key}: {why}")


class Model(BaseModel):
    """A frozen section of the file; ``settle()`` fills derived defaults, ``problems()`` checks."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        str_strip_whitespace=True,
        coerce_numbers_to_str=True,
        regex_engine="python-re",
    )

    def __init__(self, *args: Any, **values: Any):  # positional fields, in declared order
        super().__init__(**dict(zip(type(self).model_fields, args, strict=False)), **values)

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, data: Any) -> Any:
        """``key:`` with no value is the empty text, list or section, as in YAML's spirit."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: _EMPTY.get(_shape(fields[k].annotation), v) if v is None and k in fields else v
            for k, v in data.items()
        }

    @model_validator(mode="after")
    def _check(self):
        for name, value in self.settle().items():
            object.__setattr__(self, name, value)  # frozen: derived defaults, set once here
        found = list(self.problems())
        if found:
            raise PydanticCustomError("problems", "problems", {"problems": found})
        return self

    def settle(self) -> dict[str, Any]:
        return {}

    def problems(self):
        return ()


def _shape(hint: Any) -> Any:
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return BaseModel
    return typing.get_origin(hint) or hint


_EMPTY: dict[Any, Any] = {str: "", tuple: (), dict: {}, BaseModel: {}}


def cased(change, *choices: str):
    """``Literal[choices]`` (any choices) after ``change`` (``str.upper``...) of the text."""
    hint = Literal[choices] if choices else str
    return typing.Annotated[
        hint, BeforeValidator(lambda v: change(v.strip()) if isinstance(v, str) else v)
    ]


def _whole(value: Any) -> Any:
    if isinstance(value, bool | str):  # pydantic's lax int would take true and "2"
        raise PydanticCustomError("int_type", "expected an integer")
    return value


Int = typing.Annotated[int, BeforeValidator(_whole)]  # an integer, or a float such as 2.0
# The largest values of the API's integer fields (protobuf int32/int64, Duration seconds):
# a bigger one is refused here, not by the SDK's marshalling with a traceback.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
DURATION_MAX_SECONDS = 315_576_000_000  # google.protobuf.Duration: 10,000 years


def pattern(regex: str, what: str, example: str, default: Any = ...) -> Any:
    """A text field that matches ``regex`` (``what`` it describes, for messages); it may be
    empty only where empty is its default, the value that means "not set"."""
    regex = f"^$|{regex}" if default == "" else regex
    return Field(default, pattern=regex, description=what, examples=[example])


def example(value: Any, default: Any = ..., **rules: Any) -> Any:
    return Field(default, examples=[value], **rules)


def _seconds(value: Any) -> Any:
    seconds = value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*s\s*", value):
        seconds = int(value.strip()[:-1])
    if value is None or isinstance(seconds, int) and not isinstance(seconds, bool):
        if seconds is None or 0 <= seconds <= DURATION_MAX_SECONDS:
            return seconds
    raise ValueError(
        f'expected seconds as an integer or "<N>s" up to {DURATION_MAX_SECONDS}, got {value!r} '
        '(e.g. "3600s")'
    )


Seconds = typing.Annotated[int | None, BeforeValidator(_seconds)]  # 3600 or "3600s"


def _model(hint: Any) -> type[BaseModel] | None:
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint
    return next(filter(None, map(_model, typing.get_args(hint))), None)


def _choices(hint: Any) -> list[str]:
    if typing.get_origin(hint) is Literal:
        return [str(c) for c in typing.get_args(hint) if c != ""]
    return [c for arg in typing.get_args(hint) for c in _choices(arg)]


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return "nothing" if value is None else repr(value)


_WORDS = {  # pydantic's error types (by their start) in this file's words
    "missing": "missing{eg}",
    "int_": "expected an integer, got {value!r}{eg}",
    "float_": "expected a number, got {value!r}{eg}",
    "bool_": "expected true or false, got {value!r}",
    "string_type": "expected text, got {kind}{eg}",
    "string_too_short": "must not be empty{eg}",
    "string_too_long": "must be at most {max_length} characters long",
    "string_pattern": "{value!r} is not {what}{eg}",
    "greater_than_equal": "expected a number >= {ge}, got {value!r}{eg}",
    "less_than_equal": "expected a number <= {le}, got {value!r}{eg}",
    "model_": "expected a mapping, got {kind}",
    "dict_": "expected a mapping, got {kind}",
    "tuple_": "expected a list, got {kind}{eg}",
    "list_": "expected a list, got {kind}{eg}",
}


def _why(error: dict, field: Any, model: type[BaseModel] | None) -> str:
    """One pydantic error in this file's words."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx", {})
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        return "unknown key" + close_matches(name, model.model_fields if model else ())
    if kind in ("value_error", "assertion_error"):
        return str(ctx["error"])
    if kind == "literal_error":
        choices = _choices(field.annotation) if field is not None else []
        return f"expected one of {', '.join(choices)}, got {value!r}" + close_matches(
            value, choices, 1
        )
    words = next((w for start, w in _WORDS.items() if kind.startswith(start)), None)
    if words is None:
        return error["msg"]
    eg = f" (e.g. {field.examples[0]})" if field is not None and field.examples else ""
    what = field is not None and field.description or "valid"
    if kind.startswith("string_pattern") and isinstance(value, str) and not value.strip():
        return "must not be empty" + eg
    ctx = {"ge": None, "le": None, **ctx}
    return words.format(value=value, kind=_kind(value), eg=eg, what=what, **ctx)


def _located(cls: type[BaseModel], data: Any, error: dict) -> list[tuple[str, str]]:
    """``(dotted key, why)`` for one pydantic error; a ``problems`` error gives several."""
    key, node, model, field = "", data, cls, None
    loc = error["loc"]
    for index, part in enumerate(loc):
        if isinstance(part, int):
            if isinstance(node, dict) and part < len(node):  # a mapping read as a list of items
                part = str(list(node)[part])
                key = join(key, part)
            else:
                key = f"{key}[{part}]"
        elif model is not None and part in model.model_fields:
            field = model.model_fields[part]
            model, key = _model(field.annotation), join(key, part)
        elif error["type"] == "extra_forbidden" and index == len(loc) - 1:
            key = join(key, part)
            break
        elif model is None and isinstance(node, dict) and part in node:
            key = join(key, part)  # a key of a free mapping (labels, env)
        else:
            continue  # a union member's tag (int, float...): not a key of the file
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    if error["type"] == "problems":
        return [(join(key, sub) if sub else key, why) for sub, why in error["ctx"]["problems"]]
    return [(key or "(top level)", _why(error, field, model))]


def read(cls: type[BaseModel], data: Any, path: str):
    """``cls`` from a loaded document; raises ``ToolError`` with every problem located."""
    try:
        return cls.model_validate({} if data is None else data)
    except ValidationError as error:
        reader = Reader(data, path)
        for each in error.errors(include_url=False):
            for key, why in _located(cls, data, each):
                reader.problem(key, why)
        raise ToolError(*reader.problems) from None
