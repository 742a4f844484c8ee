"""Process shells of the raft log: the WAL process and the raft server, on the runtime."""
