"""The process shells of the block compaction service: the metastore raft group's
per-node follower, the compaction service on its leader, the worker pool, and the
cluster that starts them (thin shells over the pure cores in `actors/blocks/`)."""
