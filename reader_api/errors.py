"""Every failure leaves as a small JSON body ``{"error", "message", "parameter"?}``, never a traceback.

Redis being away is the client's problem to retry, not ours to crash on: any Redis error becomes a 503 with
``Retry-After``. Parameter errors name the offending parameter so a client can fix its request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ExceptionHandler

from reader_api.answers import ErrorBody

#: What reading Redis raises when it cannot answer: its errors, a socket's, and redis-py's cluster client's own
#: (no seed or node answers, or ``CLUSTER SLOTS`` is refused: not a ``RedisError``). Each is a 503, never a 500.
REDIS_FAILURES: tuple[type[Exception], ...] = (RedisError, RedisClusterException, OSError)

log = logging.getLogger("hotboard.api")

JSON = "application/json"


class ApiError(Exception):
    """An expected failure with its HTTP status (unknown board or player, invalid parameter)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        parameter: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.parameter = parameter
        self.headers = headers


def not_found(what: str, message: str) -> ApiError:
    return ApiError(404, f"{what}_not_found", message)


def invalid(parameter: str, message: str) -> ApiError:
    return ApiError(422, "invalid_parameter", f"{parameter}: {message}", parameter)


def corrupt(key: str, message: str) -> ApiError:
    """Stored data no writer of ours produces: the board cannot be answered until someone repairs ``key``."""
    return ApiError(503, "corrupt_data", f"{key}: {message}")


def error_response(
    status: int, code: str, message: str, parameter: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    body: ErrorBody = {"error": code, "message": message}
    if parameter is not None:
        body["parameter"] = parameter
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


def api_failure(exc: ApiError, retry_after_s: int) -> Response:
    headers = {"Retry-After": str(retry_after_s)} if exc.status == 503 else {}
    headers.update(exc.headers or {})
    return error_response(exc.status, exc.code, exc.message, exc.parameter, headers or None)


def redis_failure(exc: Exception, retry_after_s: int) -> Response:
    """Any Redis error or socket error towards Redis: 503 with ``Retry-After``."""
    headers = {"Retry-After": str(retry_after_s)}
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
        log.warning("redis unreachable: %s", exc)
        return error_response(503, "redis_unavailable", "Redis is unreachable; retry later", None, headers)
    log.error("redis error: %r", exc)
    return error_response(503, "redis_error", "Redis could not answer; retry later", None, headers)


def internal_failure(path: str) -> Response:
    """Anything else: logged with its traceback (call it inside the ``except``), a JSON 500."""
    log.exception("unexpected error on %s", path)
    return error_response(500, "internal_error", "internal error")


def handlers(retry_after_s: int) -> dict[type[Exception], ExceptionHandler]:
    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return api_failure(exc, retry_after_s)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    async def on_redis(request: Request, exc: Exception) -> Response:
        return redis_failure(exc, retry_after_s)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        return internal_failure(request.url.path)

    return {
        ApiError: on_api_error,
        StarletteHTTPException: on_http,
        **dict.fromkeys(REDIS_FAILURES, on_redis),
        Exception: on_unexpected,
    }
