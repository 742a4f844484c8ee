"""Spark on Ray for the block tier: the one session per cluster (`session`), the merge
as a Spark job (`merge_job`) and the process that owns the session and runs merges for
the compaction workers (`bridge`). Nothing is imported here: importing the package must
not pull in pyspark."""
