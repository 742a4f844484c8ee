"""`sediment start --detach` and `sediment stop`: a cluster that outlives the shell that
started it, as `etcd &` would, and a way to end it.

``--detach`` runs the same ``sediment start`` command (without ``--detach``) as a
background process in a session of its own (stdin from /dev/null, its output in
``<data dir>/sediment-start.out``), waits until that process wrote the state file with
its own pid (the cluster is up), prints what a foreground start prints and exits 0. The
background process stays the cluster's Ray driver: with an embedded local Ray, Ray lives
exactly as long as it does, so nothing is left behind when it stops.

``stop`` sends that process SIGTERM (what Ctrl-C does to a foreground start: the
cluster's actors are torn down, the state file marked stopped) and waits for it to
exit. It only signals a pid the state file names while that pid still runs ``sediment``
(a pid reused by another program after a crash is left alone).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sediment.local_cluster import STATE_FILE, alive, print_up

OUT_FILE = "sediment-start.out"  # a detached start's own output
START_TIMEOUT = 300.0  # seconds a detached start may take to come up (Ray's first start
# on a loaded 2-core machine takes tens of seconds)
POLL = 0.2  # seconds between two looks at the state file or the pid
TAIL = 30  # lines of a failed detached start's output shown
EXIT_OK, EXIT_DOWN, EXIT_USAGE = 0, 1, 2


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """The state file of `data_dir`, or None if there is none (or it is not one)."""
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("format") == 1 else None


def is_sediment(pid: int) -> bool:
    """Whether `pid` runs and is a sediment command (where /proc says; else: it runs)."""
    if pid <= 0 or not alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc here: trust the state file
    return b"sediment" in cmdline


def running_pid(data_dir: Path) -> int | None:
    """The pid of the `sediment start` serving `data_dir`, if one runs."""
    state = read_state(data_dir)
    if state is None or not state.get("running"):
        return None
    pid = int(state.get("pid", 0))
    return pid if is_sediment(pid) else None


def refuse_second_start(data_dir: Path) -> str | None:
    """Why a start in `data_dir` must not run (another one serves it), or None."""
    pid = running_pid(data_dir)
    if pid is None or pid == os.getpid():
        return None
    return (f"a cluster already runs in {data_dir} (pid {pid}): `sediment stop --data-dir "
            f"{data_dir}` ends it")


def start_detached(argv: Sequence[str], data_dir: Path, data_dir_arg: str) -> int:
    """Run `sediment <argv>` (a start without --detach) in the background; return once
    its cluster is up (0) or it failed (1)."""
    why = refuse_second_start(data_dir)
    if why is not None:
        print(f"sediment: {why}", file=sys.stderr)
        return EXIT_USAGE
    data_dir.mkdir(parents=True, exist_ok=True)
    out_path = data_dir / OUT_FILE
    with out_path.open("w") as out, open(os.devnull) as devnull:
        child = subprocess.Popen([sys.executable, "-m", "sediment", *argv], stdin=devnull,
                                 stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        state = read_state(data_dir)
        if state is not None and state.get("pid") == child.pid and state.get("running"):
            print_up(state, data_dir / STATE_FILE, data_dir_arg,
                     stop_hint=f"sediment stop --data-dir {data_dir_arg}")
            print(f"  pid:     {child.pid} (its output: {out_path})", flush=True)
            return EXIT_OK
        if child.poll() is not None:
            tail = out_path.read_text(errors="replace").splitlines()[-TAIL:]
            print(f"sediment: the detached start exited ({child.returncode}) before its "
                  "cluster was up; its output ends:", file=sys.stderr)
            print("\n".join(f"  {line}" for line in tail), file=sys.stderr)
            return EXIT_DOWN
        if time.monotonic() > deadline:
            child.send_signal(signal.SIGTERM)
            print(f"sediment: the cluster was not up {START_TIMEOUT:g} s after the detached "
                  f"start (stopped it; its output: {out_path})", file=sys.stderr)
            return EXIT_DOWN
        time.sleep(POLL)


def cmd_stop(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if read_state(data_dir) is None:
        print(f"sediment: no cluster state in {data_dir / STATE_FILE}", file=sys.stderr)
        return EXIT_USAGE
    pid = running_pid(data_dir)
    if pid is None:
        print(f"no cluster running in {data_dir}")
        return EXIT_OK
    print(f"stopping the cluster in {data_dir} (pid {pid}) ...", flush=True)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.wait
    while is_sediment(pid):
        if time.monotonic() > deadline:
            print(f"sediment: pid {pid} still runs {args.wait:g} s after SIGTERM (`kill "
                  f"-USR1 {pid}` writes its threads' stacks to its output; `kill -KILL "
                  f"{pid}` ends it, then `ray stop` its actors)", file=sys.stderr)
            return EXIT_DOWN
        time.sleep(POLL)
    print("stopped")
    return EXIT_OK


__all__ = ["OUT_FILE", "cmd_stop", "read_state", "refuse_second_start", "running_pid",
           "start_detached"]
