"""Erlang-style processes on Ray, or on a deterministic simulator: what process code needs.

    from sediment.runtime import Call, Down, Process, start

    async def counter(ctx: Process) -> None:
        n = 0
        while True:
            msg = await ctx.receive()
            if isinstance(msg, Call):
                n += 1
                ctx.reply(msg.from_, n)

    with start("sim", nodes=("n1", "n2")) as rt:   # or start("ray", ...)
        pid = rt.spawn(counter, node="n2")
        rt.call(pid, "incr")                        # 1

`start` returns the driver's `Runtime`; process functions get a `Process` context
(spawn, send, call, receive, link, monitor, exit, timers, failpoints). The messages a
process finds in its mailbox, the exit reasons and the typed errors are here too; the
modules under `sediment.runtime` hold the rest.
"""

from .api import BACKENDS, ProcessFailed, Runtime, start
from .common_calls import Status, UnknownRequest
from .errors import (
    BadArgument,
    CallError,
    CallExit,
    CallTimeout,
    FailpointError,
    MailboxOverflow,
    NameTaken,
    NoProc,
    NotRegistered,
    ReceiveTimeout,
    RuntimeErrorBase,
)
from .failpoints import FailpointHit
from .gen_server import GenServer, Stop, serve
from .messages import Call, Cast, Down, Exit
from .pid import Pid, Ref
from .process import Process
from .reasons import KILL, KILLED, NOCONNECTION, NOPROC, NORMAL, SHUTDOWN, Error, Shutdown

__all__ = [
    "BACKENDS",
    "KILL",
    "KILLED",
    "NOCONNECTION",
    "NOPROC",
    "NORMAL",
    "SHUTDOWN",
    "BadArgument",
    "Call",
    "CallError",
    "CallExit",
    "CallTimeout",
    "Cast",
    "Down",
    "Error",
    "Exit",
    "FailpointError",
    "FailpointHit",
    "GenServer",
    "MailboxOverflow",
    "NameTaken",
    "NoProc",
    "NotRegistered",
    "Pid",
    "Process",
    "ProcessFailed",
    "ReceiveTimeout",
    "Ref",
    "Runtime",
    "RuntimeErrorBase",
    "Shutdown",
    "Status",
    "Stop",
    "UnknownRequest",
    "serve",
    "start",
]
