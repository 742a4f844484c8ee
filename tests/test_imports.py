"""Every module of the package imports: `./dev lint`'s strict mypy covers the process
layers, not `scenarios/` or the CLI, so a module moved or renamed (as `actors/kv/shell/`
was) could leave an import there that only a scenario run would find."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"sediment": "sediment", "runtime": "sediment.runtime",
            "supervision": "sediment.supervision", "actors": "sediment.actors",
            "scenarios": "sediment.scenarios"}
SKIP = ("__main__.py",)  # runs the CLI when imported


def _modules() -> list[str]:
    out = []
    for directory, package in PACKAGES.items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            rel = path.relative_to(ROOT / directory)
            if path.name in SKIP or "pb" in rel.parts:
                continue
            parts = [*package.split("."), *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out.append(".".join(parts))
    return out


@pytest.mark.parametrize("module", _modules())
def test_the_module_imports(module: str) -> None:
    importlib.import_module(module)
