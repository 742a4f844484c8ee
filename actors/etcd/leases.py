"""Leases on the wire (etcd's Lease service and Put's lease fields).

Not built yet: no lease can be granted, so a Put naming a lease gets etcd's answer for
a lease that does not exist (ErrLeaseNotFound, nothing written), and ignore_value /
ignore_lease are refused as not supported.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.etcd.status import EtcdStatus
from sediment.actors.kv import validation, wire
from sediment.actors.kv.errors import InvalidRequest
from sediment.actors.kv.types import Put
from sediment.actors.kv.validation import Limits


class Leases:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    async def put_command(self, request: Any) -> Put:
        put = wire.put_from_pb(request)
        validation.check_request(put, self.limits)
        if request.ignore_value or request.ignore_lease:
            raise InvalidRequest("ignore_value and ignore_lease are not supported yet")
        if request.lease != 0:
            raise EtcdStatus("ErrLeaseNotFound")
        return put


__all__ = ["Leases"]
