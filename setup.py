"""Package discovery for the layout in pyproject.toml.

All metadata lives in pyproject.toml. setuptools cannot combine `packages.find` with a
package-dir mapping that puts subpackages in other top-level directories, so this file
finds the packages under each mapped directory and hands setuptools the full list.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def discover_packages(root: Path = ROOT) -> list[str]:
    """Every package in the `[tool.setuptools] package-dir` mapping, with subpackages."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    found = set(mapping)
    for name, directory in mapping.items():
        found.update(f"{name}.{sub}" for sub in find_packages(where=str(root / directory)))
    return sorted(found)


if __name__ == "__main__":
    setup(packages=discover_packages())
