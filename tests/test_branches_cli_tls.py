"""`sediment branches --endpoints` over TLS and etcd auth, against a real etcd 3.4 (no
Ray): one member serving https only, with client-certificate authentication and auth
enabled (a root user). Every command runs through `cli.main` as a user would type it;
the tier's writes and reads go over the TLS channel with the user's token on each
request (`sediment/branches_remote.py`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from etcd_helpers import _free_ports, etcd_binary, require_etcd
from tls_helpers import make_certs

from sediment import cli
from sediment.branches_remote import Security, TokenInterceptor, authenticate, parse_user

START_TIMEOUT = 30.0  # seconds for etcd to answer (a loaded machine)
PASSWORD = "s3cret-pw"


class TlsEtcd:
    """etcd 3.4 on https://127.0.0.1 with client certificates required and auth on."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.certs = make_certs(directory)
        client, peer = _free_ports(2)
        self.url = f"https://127.0.0.1:{client}"
        binary = etcd_binary()
        assert binary is not None
        self.log = open(directory / "etcd.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, "--name", "m0", "--data-dir", str(directory / "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"m0=http://127.0.0.1:{peer}",
             "--cert-file", self.certs["server"], "--key-file", self.certs["server_key"],
             "--trusted-ca-file", self.certs["ca"], "--client-cert-auth",
             "--logger", "zap", "--log-level", "error"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)

    def tls(self) -> list[str]:
        return [f"--cacert={self.certs['ca']}", f"--cert={self.certs['client']}",
                f"--key={self.certs['client_key']}"]

    def ctl(self, *args: str) -> str:
        out = subprocess.run(["etcdctl", f"--endpoints={self.url}", *self.tls(), *args],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, ETCDCTL_API="3"))
        assert out.returncode == 0, out.stderr
        return out.stdout

    def wait_and_enable_auth(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc.poll() is None, (self.dir / "etcd.log").read_text()[-2000:]
            out = subprocess.run(["etcdctl", f"--endpoints={self.url}", *self.tls(),
                                  "--dial-timeout=2s", "endpoint", "health"],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode == 0:
                break
            assert time.monotonic() < deadline, out.stderr
            time.sleep(0.2)
        self.ctl("user", "add", f"root:{PASSWORD}")
        self.ctl("user", "grant-role", "root", "root")
        self.ctl("auth", "enable")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def etcd() -> Iterator[TlsEtcd]:
    require_etcd()
    directory = Path(tempfile.mkdtemp(prefix="sediment-etcd-tls-"))
    server = TlsEtcd(directory)
    try:
        server.wait_and_enable_auth()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def run(etcd: TlsEtcd, tmp: Path, *args: str, user: str | None = f"root:{PASSWORD}",
        tls: bool = True) -> int:
    opts = ["--endpoints", etcd.url, "--data-dir", str(tmp), *(etcd.tls() if tls else [])]
    if user is not None:
        opts += ["--user", user]
    return cli.main(["--log-level", "warning", "branches", *opts, *args])


def test_the_commands_work_over_tls_with_a_users_token(
        etcd: TlsEtcd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(etcd, tmp_path, "repo", "create", "tls") == 0
    assert run(etcd, tmp_path, "put", "tls", "main", "a/1", "--address", "s3://x/1",
               "--size", "3") == 0
    capsys.readouterr()
    assert run(etcd, tmp_path, "ls", "tls", "main", "--json") == 0
    assert '"path": "a/1"' in capsys.readouterr().out
    assert run(etcd, tmp_path, "commit", "tls", "main", "-m", "first") == 0
    capsys.readouterr()
    assert run(etcd, tmp_path, "get", "tls", "main", "a/1", "--json") == 0
    assert "s3://x/1" in capsys.readouterr().out
    # what the tier wrote is in etcd, under the user's rights (etcdctl sees it as root)
    keys = etcd.ctl("--user", f"root:{PASSWORD}", "get", "--prefix", "--keys-only",
                    "/sediment/branches/b/tls/")
    assert "/sediment/branches/b/tls/main" in keys


def test_without_the_user_or_with_a_wrong_password_nothing_is_written(
        etcd: TlsEtcd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(etcd, tmp_path, "repo", "create", "nouser", user=None) != 0
    assert run(etcd, tmp_path, "repo", "create", "badpw", user="root:wrong") == 1
    assert "authenticating 'root' failed" in capsys.readouterr().err
    assert run(etcd, tmp_path, "repo", "ls", "--json") == 0
    out = capsys.readouterr().out
    assert "nouser" not in out and "badpw" not in out


def test_without_the_client_certificate_the_handshake_fails(
        etcd: TlsEtcd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--log-level", "warning", "branches", "--endpoints", etcd.url,
                     "--data-dir", str(tmp_path), f"--cacert={etcd.certs['ca']}",
                     "repo", "ls"])
    assert code != 0


def test_bad_option_combinations_are_usage_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["branches", "--data-dir", str(tmp_path), "--endpoints",
                     "127.0.0.1:1", "--cert", "c.pem", "repo", "ls"]) == 2
    assert "--cert and --key go together" in capsys.readouterr().err
    assert cli.main(["branches", "--data-dir", str(tmp_path), "--user", "u:p",
                     "repo", "ls"]) == 2
    assert "for a running cluster" in capsys.readouterr().err
    assert not (tmp_path / "kv").exists()
    assert parse_user("a:b:c") == ("a", "b:c") and parse_user("a") == ("a", "")
    with pytest.raises(ValueError, match="name"):
        parse_user(":pw")


def test_the_interceptor_puts_the_token_on_streaming_calls_too(etcd: TlsEtcd) -> None:
    """A watch (a stream) through the interceptor is authorised like a unary call."""
    from sediment.actors.etcd.pb import rpc_pb2, rpc_pb2_grpc

    security = Security(etcd.certs["ca"], etcd.certs["client"], etcd.certs["client_key"],
                        "root", PASSWORD)
    token = authenticate([etcd.url], security)
    creds = security.credentials([etcd.url])
    assert creds is not None
    with grpc.secure_channel(etcd.url.removeprefix("https://"), creds) as raw:
        channel = grpc.intercept_channel(raw, TokenInterceptor(token))
        stream = rpc_pb2_grpc.WatchStub(channel).Watch(iter([rpc_pb2.WatchRequest(
            create_request=rpc_pb2.WatchCreateRequest(key=b"/w"))]), timeout=10)
        first = next(stream)
        assert first.created and not first.canceled
        stream.cancel()
