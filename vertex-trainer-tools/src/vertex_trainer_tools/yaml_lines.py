"""vertex.yaml as YAML: PyYAML's safe loader keeping each key's line and refusing what would
read wrong (a key written twice, a key that is not a name, a character YAML does not allow, a
tag that does not fit its value); YAML merge keys (``<<: *defaults``) work.

``schema.py`` turns what it reads into the models and re-exports these names.
"""

from __future__ import annotations

from typing import Any

import yaml

from vertex_trainer_tools.errors import ToolError


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
    """Parse YAML with line numbers; raises ``ToolError`` for bad YAML and duplicate keys."""
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
        raise ToolError(f"{path}:{line}: {why}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        why = getattr(error, "problem", None) or "cannot parse it"
        raise ToolError(f"{path}{where}: is not valid YAML ({why})") from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise ToolError(*[f"{path}:{line}: {key}: {why}" for line, key, why in loader.duplicates])
    if loader.bad_keys:
        raise ToolError(
            *[
                f"{path}:{line}: {key}: every key is a name, not {kind}: quote it or fix it"
                for line, key, kind in dict.fromkeys(loader.bad_keys)
            ]
        )
    return data


def join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)
