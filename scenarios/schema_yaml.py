"""A scenario file's YAML, read with the position of every value and key.

`read_yaml` turns the text into plain data and a `Doc` that remembers where each value
and key stood, so that a problem found later is a `ScenarioError` at its line and column.
`show_path`, `got` and `did_you_mean` word those errors. Pure: no filesystem.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, NoReturn

import yaml

from sediment.scenarios.schema import MAX_TEXT_BYTES, Path_, ScenarioError


def read_yaml(text: str, source: str) -> tuple[Doc, Any]:
    """The plain data of YAML `text` (None for an empty file) and its positions."""
    if len(text) > MAX_TEXT_BYTES:
        raise ScenarioError(source, "scenario", f"text larger than {MAX_TEXT_BYTES} bytes")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = f"{exc.context}, {exc.problem}" if exc.context else exc.problem
        raise ScenarioError(source, "scenario", f"invalid YAML: {what}", line, col) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, "scenario", f"invalid YAML: {exc}") from None
    doc = Doc(source)
    return doc, (None if node is None else doc.convert(node, ()))


class Doc:
    """Plain values from YAML nodes, with the position of every value and key."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.marks: dict[Path_, tuple[int, int]] = {}
        self.key_marks: dict[Path_, tuple[int, int]] = {}
        self._scalars = yaml.constructor.SafeConstructor()

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                key = self._scalars.construct_object(knode) if isinstance(
                    knode, yaml.ScalarNode) else None
                at = (knode.start_mark.line + 1, knode.start_mark.column + 1)
                if not isinstance(key, str):
                    self.key_marks[(*path, "?")] = at
                    self.fail((*path, "?"), "keys must be strings", key=True)
                if key in out:
                    self.key_marks[(*path, key)] = at
                    self.fail((*path, key), "duplicate key", key=True)
                self.key_marks[(*path, key)] = at
                out[key] = self.convert(vnode, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, (*path, i)) for i, v in enumerate(node.value)]
        return self._scalars.construct_object(node)

    def fail(self, path: Path_, message: str, *, key: bool = False) -> NoReturn:
        mark = (self.key_marks.get(path) if key else None) or self.marks.get(path)
        if mark is None:  # a missing field: point at its parent
            parent = path
            while parent and parent not in self.marks:
                parent = parent[:-1]
            mark = self.marks.get(parent)
        line, col = mark if mark else (None, None)
        raise ScenarioError(self.source, show_path(path), message, line, col)


def show_path(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "scenario"


def got(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return repr(v if len(v) <= 40 else v[:37] + "...")
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, int | float):
        return repr(v)
    return f"a {type(v).__name__}"


def did_you_mean(v: object, choices: Sequence[str]) -> str:
    """" (did you mean 'x'?)" for a string close to one of `choices`, else ""."""
    if not isinstance(v, str):
        return ""
    close = difflib.get_close_matches(v, choices, n=1, cutoff=0.6)
    if not close:  # a case slip ("Leader") is close at any length
        close = [c for c in choices if c.lower() == v.lower()][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""



__all__ = ["Doc", "did_you_mean", "got", "read_yaml", "show_path"]
