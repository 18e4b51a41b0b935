"""Contracts only: records, decoded rows, table schemas. No Spark session, no IO."""
