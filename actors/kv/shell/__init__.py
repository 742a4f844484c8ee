"""The KV's processes (thin shells over the pure modules one level up): the KV node,
the compaction coordinator, the watcher session, their protocols and child specs."""
