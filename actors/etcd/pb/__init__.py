"""etcd 3.4's v3 API stubs, compiled from etcd's own .proto files at build time.

`../protos/` holds etcd 3.4.23's `rpc.proto`, `kv.proto` and `auth.proto` and the
`gogo.proto` they import, as the Debian package golang-etcd-server-dev ships them,
unchanged. `build()` compiles them with grpcio-tools into this directory (`rpc_pb2.py`,
`rpc_pb2_grpc.py`, `kv_pb2.py`, `auth_pb2.py`, `gogo_pb2.py`; git ignores them), with
their imports pointed at this package, so the modules are `sediment.actors.etcd.pb.*`
and etcd's message names (`etcdserverpb.RangeRequest`, ...) stay the wire's.
`./dev setup` builds them; importing this package builds them when they are missing or
older than the protos (under a file lock: Ray workers may import it at once).

Why not the stubs of `etcd-sdk-python`: they are etcd 3.3's, without the watch's
`fragment` and `watch_id`, Status' `raftAppliedIndex`/`errors`/`isLearner`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = os.path.join(os.path.dirname(HERE), "protos")
PACKAGE_PATH = "sediment/actors/etcd/pb"  # the import path the compiled modules live at
# vendored file -> (the path etcd's imports name it by, its name in this package)
SOURCES = {
    "etcd/etcdserverpb/rpc.proto": ("etcd/etcdserver/etcdserverpb/rpc.proto", "rpc.proto"),
    "etcd/mvccpb/kv.proto": ("etcd/mvcc/mvccpb/kv.proto", "kv.proto"),
    "etcd/authpb/auth.proto": ("etcd/auth/authpb/auth.proto", "auth.proto"),
    "gogoproto/gogo.proto": ("gogoproto/gogo.proto", "gogo.proto"),
}
GENERATED = ("rpc_pb2.py", "rpc_pb2_grpc.py", "kv_pb2.py", "auth_pb2.py", "gogo_pb2.py")
STAMP = os.path.join(HERE, ".protos.sha256")


def _digest() -> str:
    h = hashlib.sha256()
    for name in sorted(SOURCES):
        with open(os.path.join(PROTOS, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _fresh(digest: str) -> bool:
    if not all(os.path.exists(os.path.join(HERE, g)) for g in GENERATED):
        return False
    try:
        with open(STAMP, encoding="ascii") as f:
            return f.read().strip() == digest
    except OSError:
        return False


def _google_api_include() -> str:
    """The directory holding google/api/annotations.proto (googleapis-common-protos)."""
    import google.api

    api_dir: str = list(google.api.__path__)[0]
    return os.path.dirname(os.path.dirname(api_dir))


def build(force: bool = False) -> bool:
    """Compile the protos into this package unless they are up to date; True if it did."""
    digest = _digest()
    if not force and _fresh(digest):
        return False
    with open(os.path.join(HERE, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and _fresh(digest):
            return False
        _compile()
        with open(STAMP, "w", encoding="ascii") as f:
            f.write(digest + "\n")
    return True


def _compile() -> None:
    import grpc_tools
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory(prefix="sediment-etcdpb-") as tmp:
        src, out = os.path.join(tmp, "src"), os.path.join(tmp, "out")
        os.makedirs(out)
        renames = {etcd_path: f"{PACKAGE_PATH}/{name}" for etcd_path, name in SOURCES.values()}
        for vendored, (etcd_path, _) in SOURCES.items():
            with open(os.path.join(PROTOS, vendored), encoding="utf-8") as f:
                text = f.read()
            for old, new in renames.items():  # etcd's import paths -> this package's
                text = text.replace(f'import "{old}";', f'import "{new}";')
            dest = os.path.join(src, renames[etcd_path])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8") as f:
                f.write(text)
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        files = [renames[etcd_path] for etcd_path, _ in SOURCES.values()]
        args = ["grpc_tools.protoc", f"-I{src}", f"-I{_google_api_include()}",
                f"-I{well_known}", f"--python_out={out}", f"--grpc_python_out={out}", *files]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on the etcd protos: {' '.join(args)}")
        built = os.path.join(out, PACKAGE_PATH)
        for name in os.listdir(built):
            if name.endswith(".py"):
                staged = os.path.join(HERE, f".{name}.tmp")
                shutil.copyfile(os.path.join(built, name), staged)
                os.replace(staged, os.path.join(HERE, name))


build()
