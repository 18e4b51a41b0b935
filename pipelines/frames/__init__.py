"""The one Spark<->Python boundary for decoding: files in, Arrow batches of decoded rows out (mapInArrow)."""
