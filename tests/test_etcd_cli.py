"""The etcd API's entry points on the command line, without Ray: what `sediment start`
prints once up (every node's endpoint and an etcdctl line), what `sediment status` lists,
and the defaults (loopback, plain HTTP/2, no client certificates, auth off). The real
`sediment start` serving etcdctl runs on Ray (`tests/test_branches_cli_remote.py` starts
one detached; `tests/test_etcd_wire.py` drives etcdctl against a cluster)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sediment import cli, local_cluster
from sediment.actors.kv.auth_store import AuthState
from sediment.actors.kv.machine import NetsyMachine

ENDPOINTS = {"n1": "http://127.0.0.1:2379", "n2": "http://127.0.0.1:12379",
             "n3": "http://127.0.0.1:22379"}


def test_start_prints_every_nodes_endpoint_and_an_etcdctl_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"leader": "n2", "endpoints": ENDPOINTS, "log": str(tmp_path / "log")}
    local_cluster.print_up(state, tmp_path / local_cluster.STATE_FILE, str(tmp_path),
                           stop_hint="Ctrl-C")
    out = capsys.readouterr().out
    for node, url in ENDPOINTS.items():
        assert f"  etcd {node}: {url}\n" in out
    assert f"etcdctl --endpoints={','.join(ENDPOINTS.values())} put greeting hello" in out
    assert "stop:    Ctrl-C" in out


def test_status_lists_the_endpoints_of_a_running_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"format": 1, "backend": "ray", "nodes": list(ENDPOINTS), "pid": os.getpid(),
             "running": True, "leader": "n1", "endpoints": ENDPOINTS, "members": []}
    (tmp_path / local_cluster.STATE_FILE).write_text(json.dumps(state))
    assert cli.main(["status", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "running" in out
    for node, url in ENDPOINTS.items():
        assert f"etcd endpoint {node}: {url}\n" in out
    assert cli.main(["status", "--data-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["endpoints"] == ENDPOINTS


def test_the_api_is_off_the_network_without_tls_and_auth_by_default(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(["start"])
    assert args.etcd_host == "127.0.0.1" and args.etcd_port == 2379
    assert args.tls_cert is None and args.tls_key is None and args.client_ca is None
    m = NetsyMachine(str(tmp_path / "m"))
    try:
        assert m.auth.state == AuthState() and not m.auth.state.enabled
    finally:
        m.close()

