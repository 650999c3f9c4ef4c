"""What the worker treats as passing trouble: Redis, Kafka and the network failing. Anything else is a bug and
ends the worker (without flushing the window that met it)."""

from __future__ import annotations

from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

TRANSIENT = (RedisError, OSError, KafkaError)
