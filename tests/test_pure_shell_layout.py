"""One pure/shell convention (docs/house.md): in the actor packages that follow it, process
code (a function taking the runtime's `Process`) lives only under the package's `shell/`.
The packages another session still has to move (etcd, catalog, tables) are listed there
and left out here until they follow it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLLOWING = ("log", "blocks", "branches", "kv", "spark")


def _takes_a_process(path: Path) -> list[str]:
    """The functions of `path` with a parameter annotated `Process`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if any(a.annotation is not None and ast.unparse(a.annotation) == "Process"
                   for a in args):
                found.append(node.name)
    return found


def test_process_code_lives_only_in_each_packages_shell() -> None:
    outside = {}
    for package in FOLLOWING:
        for path in sorted((ROOT / "actors" / package).rglob("*.py")):
            rel = path.relative_to(ROOT / "actors" / package)
            if rel.parts[0] != "shell" and (names := _takes_a_process(path)):
                outside[str(path.relative_to(ROOT))] = names
    assert outside == {}


def test_the_check_sees_process_code() -> None:
    # the shells it passes over do hold process code, so an empty answer above means
    # something
    assert "flusher" in _takes_a_process(ROOT / "actors/blocks/shell/flusher.py")
    assert _takes_a_process(ROOT / "actors/kv/shell/node.py")
