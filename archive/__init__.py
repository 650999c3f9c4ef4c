"""The durable archive: every window of the topic applied to PostgreSQL exactly once, and Redis rebuilt from it."""
