"""Strict mypy covers every module of the process layers: `./dev lint` checks only the
modules pyproject.toml's `[tool.sediment.lint] strict-typed` lists, so a new module left
off that list would escape it without this test."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COVERED = ("runtime", "supervision", "actors", "sediment/wiring")
GENERATED = ("actors/etcd/pb/",)  # protoc's output (pyproject: follow_imports = "skip")


def _listed() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(config["tool"]["sediment"]["lint"]["strict-typed"])


def test_every_module_of_the_process_layers_is_strictly_typed() -> None:
    modules = {str(p.relative_to(ROOT)) for d in COVERED for p in (ROOT / d).rglob("*.py")}
    unlisted = sorted(m for m in modules - _listed() if not m.startswith(GENERATED))
    assert unlisted == []


def test_the_strict_list_names_only_files_that_exist() -> None:
    assert sorted(p for p in _listed() if not (ROOT / p).is_file()) == []
