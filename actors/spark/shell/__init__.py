"""The Spark bridge process and its protocol (the merges it runs are one level up)."""
