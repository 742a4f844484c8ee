"""The etcd v3 gRPC server's process and the code only it runs: the server, its router
to the raft leader, etcd's services (KV, Watch, Lease, Auth, Maintenance, Cluster) that
run as its tasks, and its protocol."""
