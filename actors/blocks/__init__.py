"""Cold history: immutable Parquet blocks, their metastore index and the Pyroscope-style
compaction service (planner, scheduler, workers) that merges them level by level."""
