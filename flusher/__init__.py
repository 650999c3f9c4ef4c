"""Redis writes: one atomic, fenced, single-round-trip step per board per window."""
