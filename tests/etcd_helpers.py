"""A real etcd 3.4 on loopback for tests: started by a fixture, always stopped.

Debian's `etcd-server` (3.4.23) is the reference the store's semantics are compared
with (`tests/test_etcd_differential.py`) and the source of the checkers' real-etcd
history fixtures. Each instance gets free loopback ports and a temporary data dir; one
member by default, three with `members=3`. Nothing outlives the `with` block: the
processes are terminated (killed after a grace period) and the data dir removed.

Usable from a script too: `with RealEtcd() as etcd: print(etcd.endpoint)`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

ETCD = "etcd"
START_TIMEOUT = 30.0  # seconds until the cluster answers a Status (a loaded CI box)
STOP_TIMEOUT = 10.0


def etcd_binary() -> str | None:
    """The etcd server on PATH (or in /usr/bin, where Debian puts it), if any."""
    found = shutil.which(ETCD) or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    return found


def etcd_version() -> str | None:
    binary = etcd_binary()
    if binary is None:
        return None
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    for line in out.stdout.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return None


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class RealEtcd:
    """A local etcd cluster of `members` members (1 or 3)."""

    members: int = 1
    extra_args: tuple[str, ...] = ()
    data_dir: str = ""
    endpoints: list[str] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _owns_dir: bool = False

    @property
    def endpoint(self) -> str:
        """host:port of the first member (a gRPC target)."""
        return self.endpoints[0]

    def start(self) -> RealEtcd:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (apt-get install etcd-server)")
        if self.members < 1:
            raise ValueError("members must be >= 1")
        if not self.data_dir:
            self.data_dir = tempfile.mkdtemp(prefix="sediment-etcd-")
            self._owns_dir = True
        ports = _free_ports(2 * self.members)
        names = [f"m{i}" for i in range(self.members)]
        peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(self.members)]
        cluster = ",".join(f"{n}={p}" for n, p in zip(names, peers, strict=True))
        token = f"sediment-{os.getpid()}-{ports[0]}"
        try:
            for i, name in enumerate(names):
                client = f"http://127.0.0.1:{ports[2 * i]}"
                args = [
                    binary, "--name", name, "--data-dir", os.path.join(self.data_dir, name),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
                    "--initial-cluster", cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", token, "--logger", "zap",
                    "--log-level", "error", *self.extra_args,
                ]
                log = open(os.path.join(self.data_dir, f"{name}.log"), "wb")  # noqa: SIM115
                self._procs.append(subprocess.Popen(args, stdout=log, stderr=log,
                                                    stdin=subprocess.DEVNULL))
                log.close()
                self.endpoints.append(f"127.0.0.1:{ports[2 * i]}")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Until every member answers a Status with a leader (bounded by START_TIMEOUT)."""
        import grpc

        from sediment.actors.etcd.pb import rpc_pb2, rpc_pb2_grpc

        deadline = time.monotonic() + START_TIMEOUT
        for endpoint in self.endpoints:
            with grpc.insecure_channel(endpoint) as channel:
                stub = rpc_pb2_grpc.MaintenanceStub(channel)
                while True:
                    self._check_alive()
                    try:
                        status = stub.Status(rpc_pb2.StatusRequest(), timeout=2)
                        if status.leader:
                            break
                    except grpc.RpcError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"etcd at {endpoint} did not start: {self.logs()}")
                    time.sleep(0.1)

    def _check_alive(self) -> None:
        for p in self._procs:
            if p.poll() is not None:
                raise RuntimeError(f"etcd exited with {p.returncode}: {self.logs()}")

    def logs(self) -> str:
        out = []
        for i in range(len(self._procs)):
            with contextlib.suppress(OSError), open(os.path.join(self.data_dir,
                                                                 f"m{i}.log")) as f:
                out.append(f.read()[-2000:])
        return "\n".join(out)

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(STOP_TIMEOUT)
        self._procs.clear()
        if self._owns_dir and self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = ""
            self._owns_dir = False
        self.endpoints = []

    def __enter__(self) -> RealEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def require_etcd() -> None:
    """Skip the calling test when etcd 3.4 is not installed (CI's .ci/run installs it;
    in CI a missing etcd fails instead, so a broken install step cannot hide)."""
    version = etcd_version()
    if version is None or not version.startswith("3.4."):
        if os.environ.get("CI"):
            pytest.fail(f"etcd 3.4 is not installed (found {version!r}); .ci/run installs it")
        pytest.skip(f"etcd 3.4 is not installed (found {version!r})")


@pytest.fixture
def real_etcd() -> Iterator[RealEtcd]:
    """A fresh one-member etcd 3.4 on loopback, stopped after the test."""
    require_etcd()
    with RealEtcd() as etcd:
        yield etcd


@pytest.fixture(scope="module")
def shared_etcd() -> Iterator[RealEtcd]:
    """One etcd for a whole test module (tests must not depend on its starting state)."""
    require_etcd()
    with RealEtcd() as etcd:
        yield etcd


def kv_stub(endpoint: str) -> Any:
    """A KV stub on a new channel (the caller closes the channel: `stub.channel`)."""
    import grpc

    from sediment.actors.etcd.pb import rpc_pb2_grpc

    channel = grpc.insecure_channel(endpoint)
    stub = rpc_pb2_grpc.KVStub(channel)
    stub.channel = channel
    return stub
