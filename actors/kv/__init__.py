"""Netsy KV: an MVCC store with etcd semantics over SQLite."""
