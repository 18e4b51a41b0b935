"""Pure-Python decoding of __consumer_offsets segments and records. Never imports pyspark."""
