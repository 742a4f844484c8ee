"""One pure/shell convention (docs/house.md): in every actor package, process code lives
only under the package's `shell/`. Process code is a function with a parameter
annotated `Process`, or one that uses a process context: the name `ctx`, or an
attribute `.ctx` (a shell's state or server object carrying its process: the table
node's `NodeState`, the etcd server's `EtcdServer`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLLOWING = ("log", "blocks", "branches", "kv", "spark", "etcd", "catalog", "tables")


def _uses_a_context(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id == "ctx")
               or (isinstance(n, ast.Attribute) and n.attr == "ctx") for n in ast.walk(node))


def _process_code(source: str) -> list[str]:
    """The functions of `source` that are process code (see the module docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if any(a.annotation is not None and ast.unparse(a.annotation) == "Process"
                   for a in args) or _uses_a_context(node):
                found.append(node.name)
    return found


def _of(rel: str) -> list[str]:
    return _process_code((ROOT / rel).read_text(encoding="utf-8"))


def test_process_code_lives_only_in_each_packages_shell() -> None:
    outside = {}
    for package in FOLLOWING:
        for path in sorted((ROOT / "actors" / package).rglob("*.py")):
            rel = path.relative_to(ROOT / "actors" / package)
            if rel.parts[0] != "shell" and (names := _process_code(path.read_text("utf-8"))):
                outside[str(path.relative_to(ROOT))] = names
    assert outside == {}


def test_every_package_that_has_processes_keeps_them_in_its_shell() -> None:
    # an empty answer above means something: each package's shell does hold process code
    for package in FOLLOWING:
        shell = sorted((ROOT / "actors" / package / "shell").glob("*.py"))
        assert any(_process_code(p.read_text("utf-8")) for p in shell), package


def test_the_check_sees_process_code() -> None:
    assert "flusher" in _of("actors/blocks/shell/flusher.py")
    assert "table_node" in _of("actors/tables/shell/table_node.py")  # annotated Process
    # a shell's state object carrying the process: the table node's parts, etcd's services
    assert "min_times" in _of("actors/tables/shell/node_compaction.py")
    assert "at_leader" in _of("actors/etcd/shell/leases.py")
    assert _process_code("async def ask(s):\n    return await s.ctx.call('x', 1)\n") == ["ask"]
    assert _process_code("async def f(ctx):\n    await ctx.receive()\n") == ["f"]


def test_the_check_passes_pure_code() -> None:
    assert _of("actors/catalog/low_watermark.py") == []
    assert _of("actors/etcd/lessor_core.py") == []
    assert _process_code("def step(state, event):\n    return state.ctxs, []\n") == []
