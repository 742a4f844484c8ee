"""The branch tier's processes: the delete sensor and the staging compactor."""
