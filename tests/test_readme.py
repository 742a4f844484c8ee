"""The README's examples run as written (on the simulator) and print what it says; the
examples under docs/ run too.

Every ```python block runs in a fresh interpreter; when the README follows it with
"prints:" and a ```text block, its stdout must be exactly that. A block that needs Ray
carries a marker on the line above it: `<!-- readme-test: ray-on-sim -->` runs it with
its backend switched to sim, `<!-- readme-test: skip REASON -->` skips it with that
reason. An unmarked block that names the "ray" backend fails, so no Ray example goes
untested silently. Every ```yaml block must load as a scenario, and every `sediment`
command line of a ```sh block must parse.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<what>[\w-]+)\s*(?P<why>.*?)\s*-->")
RAY = re.compile(r"""(backend=|start\()(["'])ray\2""")


@dataclass(frozen=True)
class Block:
    kind: str  # the fence's info string: python, text, sh, yaml
    code: str
    line: int  # of the opening fence, 1-based
    marker: tuple[str, str] | None  # (what, why)
    expected: str | None  # a python block's stdout, from the text block after it


def blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    found: list[tuple[str, str, int, tuple[str, str] | None, int]] = []
    i = 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\w*)", lines[i])
        if fence is None:
            i += 1
            continue
        start = i
        end = lines.index("```", i + 1)
        before = next((x for x in reversed(lines[:start]) if x.strip()), "")
        m = MARKER.fullmatch(before.strip())
        marker = (m["what"], m["why"]) if m else None
        found.append((fence[1], "\n".join(lines[start + 1:end]) + "\n", start + 1, marker, end))
        i = end + 1
    out = []
    for n, (kind, code, line, marker, end) in enumerate(found):
        expected = None
        if kind == "python" and n + 1 < len(found) and found[n + 1][0] == "text":
            between = [x.strip() for x in lines[end + 1:found[n + 1][2] - 1] if x.strip()]
            if between in ([], ["prints:"]):
                expected = found[n + 1][1]
        out.append(Block(kind, code, line, marker, expected))
    return out


BLOCKS = blocks(README.read_text())


def without_comments(code: str) -> str:
    """The code with its comments blanked (a comment may say "or start('ray')")."""
    lines = code.splitlines(keepends=True)
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col] + "\n"
    return "".join(lines)


def of_kind(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind == kind]


def test_the_readme_has_examples_of_each_kind() -> None:
    assert len(of_kind("python")) >= 3
    assert all(b.expected is not None for b in of_kind("python")), "each shows its output"
    assert of_kind("yaml") and of_kind("sh")


@pytest.mark.parametrize("block", of_kind("python"), ids=lambda b: f"line-{b.line}")
def test_python_blocks_run_and_print_what_the_readme_says(block: Block,
                                                          tmp_path: Path) -> None:
    code = block.code
    if block.marker is not None:
        what, why = block.marker
        if what == "skip":
            pytest.skip(f"README line {block.line}: {why or 'marked skip'}")
        assert what == "ray-on-sim", f"README line {block.line}: unknown marker {what!r}"
        code, switched = RAY.subn(r"\1\2sim\2", without_comments(code))
        assert switched, f"README line {block.line}: marked ray-on-sim but names no ray backend"
    else:
        assert not RAY.search(without_comments(code)), (
            f"README line {block.line} runs on Ray: mark it ray-on-sim or skip")
    env = {**os.environ, "PYTHONHASHSEED": "0", "SEDIMENT_LOG_LEVEL": "critical"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, f"README line {block.line}:\n{result.stderr}"
    assert result.stdout == block.expected, f"README line {block.line}"


DOCS = [(path.name, b) for path in sorted((ROOT / "docs").glob("*.md"))
        for b in blocks(path.read_text()) if b.kind == "python"]


@pytest.mark.parametrize(("page", "block"), DOCS, ids=lambda x: str(x) if isinstance(
    x, str) else f"line-{x.line}")
def test_python_blocks_of_the_docs_run(page: str, block: Block, tmp_path: Path) -> None:
    if block.marker is not None and block.marker[0] == "skip":
        pytest.skip(f"docs/{page}:{block.line}: {block.marker[1] or 'marked skip'}")
    assert not RAY.search(without_comments(block.code)), f"docs/{page}:{block.line} runs on Ray"
    env = {**os.environ, "PYTHONHASHSEED": "0", "SEDIMENT_LOG_LEVEL": "critical"}
    result = subprocess.run([sys.executable, "-c", block.code], capture_output=True,
                            text=True, timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, f"docs/{page}:{block.line}:\n{result.stderr}"


@pytest.mark.parametrize("block", of_kind("yaml"), ids=lambda b: f"line-{b.line}")
def test_yaml_blocks_are_valid_scenarios(block: Block) -> None:
    from sediment.scenarios import nemesis, schema

    scenario = schema.loads(block.code, source=f"README.md:{block.line}")
    nemesis.check_supported(scenario)


def command_lines() -> list[tuple[int, list[str]]]:
    out = []
    for b in of_kind("sh"):
        for n, line in enumerate(b.code.splitlines()):
            words = shlex.split(line, comments=True)
            if words:
                out.append((b.line + 1 + n, words))
    return out


@pytest.mark.parametrize(("line", "words"), command_lines(), ids=lambda x: str(x))
def test_shell_lines_are_commands_that_parse(line: int, words: list[str]) -> None:
    from sediment import cli, demo

    if words[0] == "etcdctl":  # etcd's own client (tests/test_etcd_wire.py runs it)
        return
    assert words[0] == "./dev", f"README line {line}: {words}"
    if words[1] == "sediment":
        args = cli.build_parser().parse_args(words[2:])
        assert args.command is not None
    elif words[1] == "demo":
        demo.build_parser().parse_args(words[2:])
    else:
        assert words[1] in ("test", "lint", "setup", "help"), f"README line {line}: {words}"
        usage = (ROOT / "dev").read_text()
        assert f"./dev {words[1]}" in usage


def test_the_readme_needs_no_deep_imports() -> None:
    for b in of_kind("python"):
        for line in b.code.splitlines():
            if line.startswith(("import ", "from ")):
                module = line.split()[1]
                assert module in ("sediment", "sediment.runtime"), (
                    f"README line {b.line}: {line}")


def test_the_marker_rules_are_enforced() -> None:
    text = ("```python\nstart('ray')\n```\n\n<!-- readme-test: ray-on-sim -->\n```python\n"
            "Cluster.start(backend=\"ray\")\n```\n\nprints:\n\n```text\nx\n```\n")
    first, second, _ = blocks(text)
    assert first.marker is None and RAY.search(first.code)
    assert not RAY.search(without_comments("start('sim')  # or start('ray')\n"))
    assert second.marker == ("ray-on-sim", "") and second.expected == "x\n"
    assert RAY.sub(r"\1\2sim\2", second.code) == 'Cluster.start(backend="sim")\n'
