"""The coordinator: one replay engine for `__consumer_offsets`, pure Python (no pyspark): typed shard state, Kafka's
loaders per record type (legacy and modern), expiry, `partition_for`. Records of a shard in, its rows out."""
