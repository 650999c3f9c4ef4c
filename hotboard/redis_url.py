"""A Redis URL checked once, before any client is built, with an error a person can read and paste.

redis-py refuses a malformed URL deep inside the first client with a traceback whose message may quote a piece
of the password (``Port could not be cast to integer value as 'Zq8x'`` for a password holding an unencoded
``/``). Every command that takes ``--redis`` checks it here first and prints one line instead.
"""

from __future__ import annotations

from redis.connection import parse_url

from hotboard.redis_client import split_seeds
from hotboard.safe_text import has_secret, redact_url


class BadRedisUrl(ValueError):
    """The message is the one line the user sees: the URL with its password masked, and why."""


def check(url: str, cluster: bool = False) -> None:
    """Raise :class:`BadRedisUrl` unless redis-py can read ``url`` (``cluster``: a list of seed nodes)."""
    try:
        parse_url(split_seeds(url)[0] if cluster else url)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # the parser's reason may quote a piece of the password: not shown then
        why = "percent-encode / ? # @ : % and spaces in the password" if has_secret(url) else str(exc)
        raise BadRedisUrl(f"invalid --redis {redact_url(url)!r}: {why}") from None
