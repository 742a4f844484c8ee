"""The Ra-style replicated log: raft groups, their storage and log processes."""
