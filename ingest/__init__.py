"""Kafka consumption, the event codec and the window fold."""
