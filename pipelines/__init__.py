"""offsetlake library: bytes -> records -> DataFrames -> state -> tables -> answers. Importing it never starts a JVM."""
