"""Edges: the click CLI, the spark-submit entry point and the HTTP API."""
