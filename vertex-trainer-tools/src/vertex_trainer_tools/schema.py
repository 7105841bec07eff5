"""A declared-schema reader for YAML files: frozen dataclasses in, located problems out.

The dataclasses are the schema: each field's type says what the YAML value must be, and
``spec(...)`` adds an example, choices, a minimum or a pattern. ``read(cls, data, path)`` walks
the document once, collects every problem (unknown keys with their close matches, wrong types,
missing keys, each class's own ``problems()``) and raises ``SchemaError`` with one line each,
``<file>:<line>: <key>: <why> (e.g. <example>)``. ``load_yaml`` rejects duplicate keys, which
plain ``yaml.safe_load`` silently resolves to the last one.

Only the standard library and PyYAML: the template's post-generation hook imports this under
cookiecutter's own Python.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any

import yaml

_INVALID = object()


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


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and keeps line numbers (``LineDict``/``LineList``)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[tuple[int, str, str]] = []  # (line, key path, message)
        self.paths: dict[int, str] = {}

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        path = self.paths.get(id(node), "")
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            full = join(path, key)
            self.paths[id(value_node)] = full
            if key == "<<":
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

    def construct_sequence(self, node, deep=False):
        for index, item in enumerate(node.value):
            self.paths[id(item)] = f"{self.paths.get(id(node), '')}[{index}]"
        sequence = LineList(super().construct_sequence(node, deep=deep))
        sequence.line = node.start_mark.line + 1
        sequence.lines = [item.start_mark.line + 1 for item in node.value]
        return sequence


def _construct_map(loader: StrictLoader, node):
    return loader.construct_mapping(node, deep=True)


def _construct_seq(loader: StrictLoader, node):
    return loader.construct_sequence(node, deep=True)


StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
StrictLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_yaml(text: str, path: str) -> Any:
    """Parse YAML with line numbers; raises ``SchemaError`` for bad YAML and duplicate keys."""
    loader = StrictLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        why = getattr(error, "problem", None) or "cannot parse it"
        raise SchemaError([f"{path}{where}: is not valid YAML ({why})"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise SchemaError([f"{path}:{line}: {key}: {why}" for line, key, why in loader.duplicates])
    return data


def join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def spec(default: Any = dataclasses.MISSING, **rules: Any):
    """A dataclass field with reading rules.

    ``example`` (shown as "(e.g. ...)"), ``choices`` (``blank_ok``: "" too), ``case``
    ("upper"/"lower", applied first), ``minimum``, ``pattern`` with ``what`` it describes,
    ``key_pattern`` (names of a dict field), ``keyed`` (a mapping of id -> item, the id filling
    that field of the item), ``empty_item`` (a factory for ``{}``/null list items),
    ``duration`` (seconds: an integer or "3600s"), ``factory`` (a default factory), ``skip``
    (not read from the file: given by the caller).
    """
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple or default_factory")
    if callable(rules.get("factory")):
        return dataclasses.field(default_factory=rules.pop("factory"), metadata=rules)
    return dataclasses.field(default=default, metadata=rules)


def example_of(rules: dict) -> str:
    return f" (e.g. {rules['example']})" if "example" in rules else ""


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

    def read(self, cls: type, data: Any, key: str = "", /, **given: Any):
        """An instance of the dataclass ``cls`` from ``data``; problems are collected."""
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("skip")}
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.problem(key or "(top level)", f"expected a mapping, got {_kind(data)}")
            return Reader(None, self.path).read(cls, {}, key, **given)  # no "missing" lines
        for name in data:
            if name not in fields:
                self.problem(join(key, name), "unknown key" + close_matches(name, fields))
        values = dict(given)
        for name, field in fields.items():
            sub = join(key, name)
            if name in data:
                value = self.value(hints[name], data[name], sub, field.metadata)
            elif _required(field):
                self.problem(sub, "missing" + example_of(field.metadata))
                value = _zero(hints[name], self, sub)
            else:
                continue
            if (value is _INVALID or value is None) and _required(field):
                value = _zero(hints[name], self, sub)  # reported: keep reading the rest
            if value is not _INVALID:
                values[name] = value
        try:
            instance = cls(**values)
        except (TypeError, ValueError, AttributeError):  # a part too broken to build on
            return None
        try:
            checks = list(getattr(instance, "problems", list)())
        except (TypeError, ValueError, AttributeError):  # built from stand-ins: reported above
            checks = []
        for sub, why in checks:
            self.problem(join(key, sub) if sub else key, why)
        return instance

    def value(self, hint: Any, value: Any, key: str, rules: dict) -> Any:
        """One value of type ``hint`` (a scalar, ``X | None``, tuple, dict or dataclass)."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            if value is None:
                return None
            hint = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            return self.read(hint, value, key)
        if origin is tuple:
            return self._sequence(args[0], value, key, rules)
        if origin is dict:
            return self._mapping(value, key, rules)
        return self._scalar(hint, value, key, rules)

    def _sequence(self, item: Any, value: Any, key: str, rules: dict) -> Any:
        if rules.get("keyed"):
            if not isinstance(value, dict) or not value:
                self.problem(key, "expected a mapping of id -> spec" + example_of(rules))
                return ()
            items = (
                self.read(item, v, join(key, k), **{rules["keyed"]: str(k)})
                for k, v in value.items()
            )
            return tuple(i for i in items if i is not None)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problem(key, f"expected a list, got {_kind(value)}" + example_of(rules))
            return _INVALID
        result = []
        for index, entry in enumerate(value):
            sub = f"{key}[{index}]"
            if dataclasses.is_dataclass(item):
                if entry in (None, {}) and rules.get("empty_item"):
                    result.append(rules["empty_item"]())
                elif (read := self.read(item, entry, sub)) is not None:
                    result.append(read)
            elif item is Any:
                if isinstance(entry, dict | list):
                    self.problem(sub, f"expected a number or text, got {_kind(entry)}")
                result.append(entry)
            else:
                read = self._scalar(item, entry, sub, {})
                if read is not _INVALID:
                    result.append(read)
        return tuple(result)

    def _mapping(self, value: Any, key: str, rules: dict) -> Any:
        if value is None:
            return {}
        pattern = rules.get("key_pattern")
        if not isinstance(value, dict) or (
            pattern and not all(re.match(pattern, str(k)) for k in value)
        ):
            self.problem(key, "expected a mapping of NAME: value" + example_of(rules))
            return _INVALID
        return {str(k): "" if v is None else str(v) for k, v in value.items()}

    def _scalar(self, hint: Any, value: Any, key: str, rules: dict) -> Any:
        eg = example_of(rules)
        if rules.get("duration"):
            return self._duration(value, key, eg)
        if hint is bool:
            if not isinstance(value, bool):
                self.problem(key, f"expected true or false, got {value!r}")
                return _INVALID
            return value
        if isinstance(value, bool) or value is None and hint is not str:
            self.problem(key, f"expected {_name(hint)}, got {value!r}{eg}")
            return _INVALID
        if hint is int:
            if not isinstance(value, int | float) or value != int(value):
                self.problem(key, f"expected an integer, got {value!r}{eg}")
                return _INVALID
            value = int(value)
        elif hint is float:
            if not isinstance(value, int | float):
                self.problem(key, f"expected a number, got {value!r}{eg}")
                return _INVALID
        elif hint is str:
            if value is None:
                return ""
            if not isinstance(value, str | int | float):
                self.problem(key, f"expected text, got {_kind(value)}{eg}")
                return _INVALID
            value = str(value).strip()
            if rules.get("case") == "upper":
                value = value.upper()
            elif rules.get("case") == "lower":
                value = value.lower()
            choices = rules.get("choices")
            if choices and value not in choices and (value or not rules.get("blank_ok")):
                self.problem(
                    key,
                    f"expected one of {', '.join(choices)}, got {value!r}"
                    + close_matches(value, choices, 1),
                )
                return _INVALID
            if value and rules.get("pattern") and not re.match(rules["pattern"], value):
                self.problem(key, f"{value!r} is not {rules.get('what', 'valid')}{eg}")
        minimum = rules.get("minimum")
        if minimum is not None and isinstance(value, int | float) and value < minimum:
            self.problem(key, f"expected a number >= {minimum}, got {value!r}{eg}")
        return value

    def _duration(self, value: Any, key: str, eg: str) -> Any:
        if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*s\s*", value):
            return int(value.strip()[:-1])
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        self.problem(key, f'expected seconds as an integer or "<N>s", got {value!r}{eg}')
        return _INVALID


def read(cls: type, data: Any, path: str, /, **given: Any):
    """Read a whole document into ``cls``; raises ``SchemaError`` listing every problem."""
    reader = Reader(data, path)
    instance = reader.read(cls, data, "", **given)
    if reader.problems or instance is None:
        raise SchemaError(reader.problems or [f"{path}: cannot be read"])
    return instance


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _zero(hint: Any, reader: Reader, key: str) -> Any:
    """A stand-in for a missing required value, so later checks still run (and stay quiet)."""
    if dataclasses.is_dataclass(hint):  # its own "missing" lines would repeat the parent's
        return Reader(None, reader.path).read(hint, {}, key)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin in (tuple, dict):
        return origin()
    return {str: "", int: 0, float: 0.0, bool: False}.get(hint, _INVALID)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "nothing" if value is None else repr(value)


def _name(hint: Any) -> str:
    return {int: "an integer", float: "a number", str: "text"}.get(hint, str(hint))
