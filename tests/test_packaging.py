"""pyproject.toml, setup.py and requirements.lock agree with each other and the tree."""

from __future__ import annotations

import re
import runpy
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, ver = line.partition("==")
        assert sep and ver, f"not an exact pin: {line!r}"
        pins[_norm(name)] = ver
    return pins


def test_every_package_directory_is_packaged() -> None:
    discover = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_for_tests")
    packages = set(discover["discover_packages"]())
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    expected = set()
    for name, directory in mapping.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / directory)
            expected.add(".".join([name, *rel.parts]))
    assert expected <= packages
    assert {"sediment.runtime.sim", "sediment.runtime.ray"} <= packages


def test_direct_dependencies_are_pinned_and_locked() -> None:
    lock = _lock()
    project = PYPROJECT["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["dev"]
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?==([^;\s]+)", requirement)
        assert match, f"not an exact pin: {requirement!r}"
        name, version = _norm(match.group(1)), match.group(3)
        assert lock.get(name) == version, f"{name}: pyproject {version}, lock {lock.get(name)}"


def test_lock_does_not_contain_the_project_itself() -> None:
    assert "sediment" not in _lock()
