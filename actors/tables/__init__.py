"""Partitioned tables over the catalog (seed 002's data side).

Pure cores: hash partitioning and replica placement, MVCC rows with write intents,
transactions through a commit partition, the partition raft machine's logic, the
minimum active-transaction time partitions store for catalog compaction, index builds
and rebalances. Shells (sim and Ray runtime processes): the SQLite partition machine
(`partition_machine.py`) in partition raft groups started per node
(`shell/partition_members.py`), the table node (`shell/table_node.py`,
`shell/node_txs.py`, `shell/node_reads.py`), the drivers and the child specs the
wiring layer assembles a cluster from (`shell/cluster.py`), and the history recorder
(`recorder.py`). `docs/catalog.md` says what is built and what is not."""
