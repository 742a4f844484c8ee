"""A scenario back to plain data (`Scenario.to_dict`): what a file would say, so that
`load_dict(s.to_dict()) == s`; numbers that are whole are written as ints."""

from __future__ import annotations

from typing import Any

from sediment.scenarios.schema import (
    MIX_OPS,
    ArmFailpoint,
    ClockSkew,
    Delay,
    Drop,
    Fault,
    FaultAction,
    Heal,
    KillNode,
    KillProcess,
    Partition,
    PauseProcess,
    ProcessTarget,
    RestartNode,
    RestartProcess,
    ResumeProcess,
    Scenario,
    WatcherSpec,
)
from sediment.scenarios.schema_blocks import blocks_dict
from sediment.scenarios.schema_branches import branches_dict


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _target_dict(t: ProcessTarget) -> dict[str, Any]:
    return {k: v for k, v in (("role", t.role), ("name", t.name), ("node", t.node))
            if v is not None}


def _action_dict(a: FaultAction) -> dict[str, Any]:
    match a:
        case KillProcess(target=t) | RestartProcess(target=t) | PauseProcess(target=t) | \
                ResumeProcess(target=t):
            return _target_dict(t)
        case KillNode(node=n):
            return {"node": n}
        case RestartNode(node=n):
            return {} if n is None else {"node": n}
        case Partition(sides=sides, isolate=iso):
            return {"isolate": iso} if iso is not None else {
                "sides": [list(s) for s in sides or ()]}
        case Heal():
            return {}
        case Delay(between=b, min=lo, max=hi, probability=p):
            out: dict[str, Any] = {} if b is None else {"between": list(b)}
            return {**out, "min": _num(lo), "max": _num(hi), "probability": _num(p)}
        case Drop(between=b, probability=p):
            return {**({} if b is None else {"between": list(b)}), "probability": _num(p)}
        case ClockSkew(node=n, seconds=s):
            return {"node": n, "seconds": _num(s)}
        case ArmFailpoint(target=t, point=pt, action=act, count=c, seconds=s):
            d = {**_target_dict(t), "point": pt, "action": act,
                 "count": "always" if c is None else c}
            return d if s is None else {**d, "seconds": _num(s)}
    raise AssertionError(a)  # every action is matched above


def scenario_dict(s: Scenario) -> dict[str, Any]:
    t = s.traffic
    traffic: dict[str, Any] = {
        "clients": t.clients, "keys": t.keys,
        "mix": {k: _num(getattr(t.mix, k)) for k in MIX_OPS}, "value_size": t.value_size,
    }
    if t.rate is not None:
        traffic["rate"] = _num(t.rate)
    if t.client != "native":
        traffic["client"] = t.client
    if t.watchers:
        traffic["watchers"] = [_watcher_dict(w) for w in t.watchers]
    if t.compactions is not None:
        c = t.compactions
        traffic["compactions"] = (
            {"every": _num(c.every), "ahead": c.ahead} if c.every is not None
            else [{"at": _num(x.at), "revision": x.revision} for x in c.at])
    settings = {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in s.cluster.settings.to_kwargs().items()}
    out: dict[str, Any] = {
        "name": s.name, "description": s.description, "seed": s.seed,
        "duration": _num(s.duration), "backends": list(s.backends),
        "cluster": {"nodes": list(s.cluster.nodes), "settings": settings,
                    **({} if s.cluster.blocks is None
                       else {"blocks": blocks_dict(s.cluster.blocks)}),
                    **({} if s.cluster.branches is None
                       else {"branches": branches_dict(s.cluster.branches)})},
        "traffic": traffic,
        "faults": [_fault_dict(f) for f in s.faults],
        "checks": list(s.checks),
    }
    if s.ray_duration is not None:
        out["ray_duration"] = _num(s.ray_duration)
    return out


def _watcher_dict(w: WatcherSpec) -> dict[str, Any]:
    d: dict[str, Any] = {"count": w.count, "start": w.start, "prev_kv": w.prev_kv}
    if w.open_at:
        d["open_at"] = _num(w.open_at)
    for k in ("slow", "pause_at", "resume_at"):
        if getattr(w, k) is not None:
            d[k] = _num(getattr(w, k))
    if w.filters:
        d["filters"] = list(w.filters)
    return d


def _fault_dict(f: Fault) -> dict[str, Any]:
    d: dict[str, Any] = {"at": _num(f.at), f.name: _action_dict(f.action)}
    if f.until is not None:
        d["until"] = _num(f.until)
    if f.when is not None and f.when.fired is not None:
        d["when"] = {f.when.trigger: f.when.fired, **(
            {} if f.when.within is None else {"within": _num(f.when.within)})}
    elif f.when is not None:
        d["when"] = (f.when.trigger if f.when.within is None
                     else {"trigger": f.when.trigger, "within": _num(f.when.within)})
    return d


__all__ = ["scenario_dict"]
