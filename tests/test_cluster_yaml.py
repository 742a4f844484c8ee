"""ray_cluster.yaml is a config `ray up` accepts, and it pins Ray's auth mode.

Uses the launcher's own steps (prepare_config, then validate_config against Ray's JSON
schema), the same ones `ray up` runs before it contacts any machine. Nothing here starts
Ray or opens a connection.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "ray_cluster.yaml"

ray_util = pytest.importorskip("ray.autoscaler._private.util")


def load() -> dict[str, Any]:
    with CLUSTER_YAML.open(encoding="utf-8") as f:
        config = yaml.safe_load(f)
    assert isinstance(config, dict)
    return config


def prepared(config: dict[str, Any]) -> dict[str, Any]:
    result = ray_util.prepare_config(copy.deepcopy(config))
    assert isinstance(result, dict)
    return result


def test_ray_accepts_the_cluster_file() -> None:
    config = prepared(load())
    ray_util.validate_config(config)
    assert config["provider"]["type"] == "local"
    # the local provider derives one node type and the worker count from worker_ips
    (node_type,) = config["available_node_types"].values()
    assert node_type["max_workers"] == len(config["provider"]["worker_ips"])


def test_validation_has_teeth() -> None:
    """The check above would catch a typo: an unknown top-level key is rejected."""
    config = load()
    config["setup_comands"] = config.pop("setup_commands")
    with pytest.raises(Exception, match="setup_comands"):
        ray_util.validate_config(prepared(config))


def test_placeholders_and_auth_are_present() -> None:
    config = load()
    assert config["provider"]["head_ip"]
    assert isinstance(config["provider"]["worker_ips"], list)
    assert config["auth"]["ssh_user"]
    # the project is mounted and installed from the lock on every node
    assert "." in config["file_mounts"].values()
    assert any("./dev setup" in cmd for cmd in config["setup_commands"])
    assert (ROOT / "dev").is_file()


def _auth_modes(commands: list[str]) -> set[str]:
    modes = set()
    for cmd in commands:
        if "ray start" in cmd:
            found = re.findall(r"\bRAY_AUTH_MODE=(\w+)", cmd)
            assert found, f"`ray start` without an explicit RAY_AUTH_MODE: {cmd!r}"
            modes.update(found)
    return modes


def test_every_ray_start_sets_the_same_auth_mode() -> None:
    config = load()
    head = _auth_modes(config["head_start_ray_commands"])
    workers = _auth_modes(config["worker_start_ray_commands"])
    assert head and workers, "both start-command lists must run `ray start`"
    # Ray requires the same mode on every node
    assert head == workers
    assert head <= {"token", "disabled"}
    if head == {"token"}:
        # token mode needs the same token file on every node
        assert "~/.ray/auth_token" in config["file_mounts"]
