"""Partitioned tables over the catalog (the pure parts of seed 002's data side): hash
partitioning and replica placement, MVCC rows with write intents, transactions through a
commit partition, the partition raft machine's logic, the minimum active-transaction time
partitions store for catalog compaction, index builds and rebalances. No I/O here: the
SQLite-backed partition machine and the node processes are shells still to come
(`docs/catalog.md`)."""
