"""vertex.yaml's reader: pydantic models in, located problems out.

The models (``Model``: frozen, no unknown keys) are the schema: each field's type and
``Field(...)`` say what the YAML value must be (``examples`` shows as "(e.g. ...)",
``description`` names what a ``pattern`` describes), and each model's ``problems()`` adds its
cross-field rules. ``read(cls, data, path)`` turns every pydantic error into one line,
``<file>:<line>: <key>: <why> (e.g. <example>)``, and raises ``SchemaError`` with all of them.
``load_yaml`` keeps line numbers and rejects duplicate keys, which plain ``yaml.safe_load``
silently resolves to the last one.
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError


class SchemaError(ValueError):
    """The file is malformed; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class LineDict(dict):
    """A YAML mapping that remembers the line of each key (1-based)."""

    line = 0
    lines: dict[Any, int]


class LineList(list):
    """A YAML sequence that remembers the line of each item (1-based)."""

    line = 0
    lines: list[int]


# libyaml's parser when PyYAML has it (about ten times faster), else PyYAML's own.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(_SAFE_LOADER):
    """SafeLoader that rejects duplicate keys and keeps line numbers (``LineDict``/``LineList``)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[tuple[int, str, str]] = []  # (line, key path, message)
        self.bad_keys: list[tuple[int, str, str]] = []  # keys that are not text: (line, path, kind)
        self.paths: dict[int, str] = {}

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        path = self.paths.get(id(node), "")
        own = sum(1 for key_node, _ in node.value if key_node.tag != MERGE_TAG)
        self.flatten_mapping(node)  # YAML merge keys (<<: *defaults): their keys come first
        merged = len(node.value) - own  # a key of the mapping itself overrides a merged one
        for index, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            full = join(path, key)
            self.paths[id(value_node)] = full
            if not isinstance(key, str):
                self.bad_keys.append((line, join(path, _key_text(key)), _key_kind(key)))
            if index < merged:
                continue
            try:
                first = seen.get(key)
                seen.setdefault(key, line)
            except TypeError:  # an unhashable key: SafeLoader reports it below
                continue
            if first is not None:
                self.duplicates.append(
                    (line, full, f"duplicate key (also on line {first}): keep one of them")
                )
        mapping = LineDict(super().construct_mapping(node, deep=deep))
        mapping.line = node.start_mark.line + 1
        mapping.lines = {
            self.construct_object(k, deep=True): k.start_mark.line + 1
            for k, _ in node.value
            if isinstance(k, yaml.ScalarNode)
        }
        return mapping

    def construct_object(self, node, deep=False):
        """PyYAML's constructors fail with a bare error on a tag that does not fit its value
        (``!!timestamp pd-ssd``, ``!!int abc``): a located YAML error instead."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, OverflowError):
            why = f"{node.tag.rpartition(':')[2] or node.tag} cannot read {node.value!r}"
            raise yaml.constructor.ConstructorError(None, None, why, node.start_mark) from None

    def construct_sequence(self, node, deep=False):
        for index, item in enumerate(node.value):
            self.paths[id(item)] = f"{self.paths.get(id(node), '')}[{index}]"
        sequence = LineList(super().construct_sequence(node, deep=deep))
        sequence.line = node.start_mark.line + 1
        sequence.lines = [item.start_mark.line + 1 for item in node.value]
        return sequence


MERGE_TAG = "tag:yaml.org,2002:merge"


def _key_text(key: Any) -> str:
    """A key as YAML writes it: ``null``, ``true``, ``1``."""
    if isinstance(key, bool) or key is None:
        return "null" if key is None else str(key).lower()
    return str(key)


def _key_kind(key: Any) -> str:
    """How YAML read an unquoted key that is not text: ``1 (an integer)``, ``true``..."""
    if isinstance(key, bool) or key is None:
        return _key_text(key)
    kind = {int: "an integer", float: "a number"}.get(type(key), type(key).__name__)
    return f"{key!r} ({kind})"


def _construct_map(loader: StrictLoader, node):
    return loader.construct_mapping(node, deep=True)


def _construct_seq(loader: StrictLoader, node):
    return loader.construct_sequence(node, deep=True)


StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
StrictLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_yaml(text: str, path: str) -> Any:
    """Parse YAML with line numbers; raises ``SchemaError`` for bad YAML and duplicate keys."""
    loader = None
    try:
        loader = StrictLoader(text)
        data = loader.get_single_data()
    except yaml.reader.ReaderError as error:  # a control character, say: no problem_mark
        if _SAFE_LOADER is yaml.SafeLoader:
            line = text[: error.position].count("\n") + 1
        else:  # libyaml counts UTF-8 bytes
            line = text.encode()[: error.position].count(b"\n") + 1
        why = f"holds character U+{error.character:04X}, which YAML does not allow: remove it"
        raise SchemaError([f"{path}:{line}: {why}"]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        why = getattr(error, "problem", None) or "cannot parse it"
        raise SchemaError([f"{path}{where}: is not valid YAML ({why})"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise SchemaError([f"{path}:{line}: {key}: {why}" for line, key, why in loader.duplicates])
    if loader.bad_keys:
        raise SchemaError(
            [
                f"{path}:{line}: {key}: every key is a name, not {kind}: quote it or fix it"
                for line, key, kind in dict.fromkeys(loader.bad_keys)
            ]
        )
    return data


def join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


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
    """``cls`` from a loaded document; raises ``SchemaError`` with every problem located."""
    try:
        return cls.model_validate({} if data is None else data)
    except ValidationError as error:
        reader = Reader(data, path)
        for each in error.errors(include_url=False):
            for key, why in _located(cls, data, each):
                reader.problem(key, why)
        raise SchemaError(reader.problems) from None
