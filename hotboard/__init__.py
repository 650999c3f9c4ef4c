"""hotboard: real-time leaderboards, exactly once, from Kafka into Redis sorted sets."""

from importlib.metadata import version

#: The one definition is ``[project] version`` in pyproject.toml; everything else reads it from here.
__version__ = version("hotboard")
