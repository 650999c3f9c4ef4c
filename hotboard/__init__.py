"""hotboard: real-time leaderboards, exactly once, from Kafka into Redis sorted sets."""

__version__ = "0.1.0"
