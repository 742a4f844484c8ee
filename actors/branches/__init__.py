"""Versioned branches over the block store (lakeFS's Graveler with staging compaction)."""
