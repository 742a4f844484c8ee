"""The tables tier's processes (thin shells over the pure modules one level up): the
table node and its parts, the index build and rebalance drivers, group tasks, partition
members, their protocols and child specs."""
