"""The public face: `from sediment import Cluster` and `sediment.runtime` for process
code, with no deep imports; `import sediment` stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sediment
import sediment.runtime as runtime


def test_cluster_and_its_errors_come_from_the_top() -> None:
    from sediment.actors.kv import errors
    from sediment.wiring.cluster import Cluster

    assert sediment.Cluster is Cluster
    assert sediment.ErrCompacted is errors.ErrCompacted
    assert issubclass(sediment.ErrCompacted, sediment.KvError)
    assert {"Cluster", "ErrCompacted", "KvError"} <= set(dir(sediment))


def test_connect_is_the_etcd_client() -> None:
    from sediment.actors.etcd.client import connect

    assert sediment.connect is connect
    with pytest.raises(ValueError, match="endpoint"):
        sediment.connect("")


def test_importing_sediment_imports_no_cluster() -> None:
    code = ("import sys, sediment; print(sediment.__version__); "
            "print(any(m.startswith(('sediment.actors', 'sediment.runtime', 'ray')) "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == [sediment.__version__, "False"]


def test_the_runtime_exports_what_process_code_needs() -> None:
    from sediment.runtime import api, errors, messages, process, reasons

    assert runtime.start is api.start
    assert runtime.Process is process.Process
    assert (runtime.Call, runtime.Down, runtime.Exit) == (messages.Call, messages.Down,
                                                          messages.Exit)
    assert runtime.NoProc is errors.NoProc and runtime.KILLED == reasons.KILLED
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None, name
