"""Ignite 3 catalog compaction (seed 002): the pure cores, and two shells: the
metastore group's machine (`metastore_machine.py`) and the compaction coordinator
process (`shell/coordinator_process.py`).

A versioned catalog (zones, tables, indexes) changed by DDL, every version with an
activation time on the hybrid logical clock; its update log compacted to a snapshot only
when no transaction, raft log replay, index build or rebalance still needs the older
versions. `docs/catalog.md` maps each module to Ignite's classes and says which shells exist.
"""
