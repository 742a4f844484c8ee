"""OTP supervision: child specs, flags, the pure decision core and the supervisor process."""

from sediment.supervision import requests
from sediment.supervision.spec import Backoff, ChildSpec, SupFlags
from sediment.supervision.starting import IGNORE, Spawn, start_function
from sediment.supervision.supervisor import start_link, start_top, supervisor

__all__ = [
    "IGNORE",
    "Backoff",
    "ChildSpec",
    "Spawn",
    "SupFlags",
    "requests",
    "start_function",
    "start_link",
    "start_top",
    "supervisor",
]
