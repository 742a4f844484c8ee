"""The catalog's process (a thin shell over the pure cores one level up): the
compaction coordinator."""
