"""The read API under hostile clients: a real ``hotboard api`` process, raw sockets, bounded loops.

Each test asserts on what the server answers (status codes, JSON error codes, headers) or on what it holds
(RSS from /proc, connections it opened towards Redis), never on its logs.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from bench.api import MiB, pipelined_flood
from cli.devstack import LOOPBACK, free_port
from hotboard import keys
from tests.integration.reader_harness import ApiServer, api_server

pytestmark = pytest.mark.integration

BOARD = "g"
RANK = b"GET /v1/boards/g/players/p5 HTTP/1.1\r\nHost: t\r\n\r\n"
#: The documented saturation bound (docs/api.md, "Answers"), spelled out rather than imported: the test pins the
#: documented value, not whatever the code holds.
MAX_SCORE = 2**53 - 1


@pytest.fixture
def board(redis_url: str) -> str:
    client = redis.Redis.from_url(redis_url)
    try:
        client.zadd(keys.board_key(BOARD), {f"p{i}": i for i in range(100)})
        client.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1_700_000_000_000})
    finally:
        client.close()
    return redis_url


# --- raw HTTP/1.1 ---------------------------------------------------------------------------------------


def connect(port: int, timeout_s: float = 10.0) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The one response the server sends: status, lower-cased headers, body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]


def ask(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    with connect(port) as sock:
        sock.sendall(request)
        return read_response(sock)


def closed_by_server(sock: socket.socket, within_s: float) -> bytes | None:
    """What the server sent before closing, or None if it kept the connection open for ``within_s``."""
    sock.settimeout(within_s)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return received


def shed_by_server(sock: socket.socket) -> bool:
    """The server has closed ``sock`` (which never sent anything), without waiting."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def error_code(body: bytes) -> str:
    code: str = orjson.loads(body)["error"]
    return code


# --- 1. pipelining ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mib", "connections"), [(8, 1), (1, 10)])
def test_pipelined_flood_holds_a_small_constant(board: str, tmp_path: Path, mib: int, connections: int) -> None:
    with (
        api_server(board, tmp_path, env={"HOTBOARD_API_LOG_LEVEL": "warning"}) as server,
        pipelined_flood(server.port, server.pid, RANK, mib, connections) as growth,
    ):
        print(f"pipelined flood, {connections} x {mib} MiB: RSS +{growth / MiB:.1f} MiB")
        # Once the responses no longer fit the sockets' buffers (here: a rank answer 30 bytes longer, with
        # nosniff), every connection waits on write flow control; measured 17.3 MiB for ten, 1.3 for one.
        assert growth < 24 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
        assert ask(server.port, RANK)[0] == 200, "a well-behaved client must still be served"


# --- 2. request line and header limits; 6. no redirect built from Host ------------------------------------


@pytest.fixture
def server(board: str, tmp_path: Path) -> Iterator[ApiServer]:
    with api_server(board, tmp_path) as api:
        yield api


def test_a_long_request_line_is_414(server: ApiServer) -> None:
    status, _, body = ask(server.port, b"GET /healthz?x=" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert (status, error_code(body)) == (414, "request_line_too_long")


def test_too_many_headers_is_431(server: ApiServer) -> None:
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(500))  # ~4.4 KiB: under the byte limit
    status, _, body = ask(server.port, b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + many + b"\r\n")
    assert (status, error_code(body)) == (431, "headers_too_large")


def test_a_huge_header_is_431_before_it_has_arrived(server: ApiServer) -> None:
    """One header of 16 MiB, sent as fast as the server takes it."""
    total, sent = 16 * MiB, 0
    chunk = b"a" * 65536
    with connect(server.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ")
        sock.setblocking(False)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while sent < total and not select.select([sock], [], [], 0)[0]:
                if select.select([sock], [sock], [], 5.0)[1]:
                    with contextlib.suppress(BlockingIOError):
                        sent += sock.send(chunk)
        sock.settimeout(10)
        status, _, body = read_response(sock)
    assert (status, error_code(body)) == (431, "headers_too_large")
    assert sent < total


def test_heads_within_the_limits_are_answered(server: ApiServer) -> None:
    """A 7,000-byte request line (a friends list) and 90 headers: the limits leave room for real clients."""
    ids = ",".join(f"p{i % 100}-{'x' * 26}" for i in range(200))[:6900].rsplit(",", 1)[0]
    headers = b"".join(b"X-%d: 1\r\n" % i for i in range(89))
    request = f"GET /v1/boards/g/players?ids={ids} HTTP/1.1\r\n".encode() + b"Host: t\r\n" + headers + b"\r\n"
    assert ask(server.port, request)[0] == 200


def test_a_trailing_slash_is_404_not_a_redirect_to_the_host_header(server: ApiServer) -> None:
    status, headers, body = ask(server.port, b"GET /v1/boards/g/top/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert (status, error_code(body)) == (404, "not_found") and "location" not in headers


def _get(target: bytes) -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n"


#: One request per writer of responses: the fast path, the full app, the protocol's own refusals.
ANY_RESPONSE = {
    "fast-200": RANK,
    "fast-404": _get(b"/v1/boards/g/players/nobody"),
    "fast-422": _get(b"/v1/boards/g/top?limit=x"),
    "app-200": _get(b"/v1/boards/g"),
    "app-players": _get(b"/v1/boards/g/players?ids=p1,p2"),
    "healthz": _get(b"/healthz"),
    "openapi": _get(b"/openapi.json"),
    "docs": _get(b"/docs"),
    "app-404": _get(b"/nowhere"),
    "app-405": b"POST /v1/boards/g HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    "414": _get(b"/healthz?x=" + b"a" * 20_000),
    "431": b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(500)) + b"\r\n",
    "400": b"NOT HTTP AT ALL\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", ANY_RESPONSE.values(), ids=ANY_RESPONSE.keys())
def test_every_response_says_nosniff(server: ApiServer, request_bytes: bytes) -> None:
    """Browsers must not sniff a JSON (or error) body into HTML: every answer, whoever writes it."""
    status, headers, _ = ask(server.port, request_bytes)
    assert headers.get("x-content-type-options") == "nosniff", status


# --- 3. timeouts and the connection cap ---------------------------------------------------------------


def test_slow_and_idle_clients_are_timed_out(board: str, tmp_path: Path) -> None:
    env = {"HOTBOARD_API_HEAD_TIMEOUT_S": "0.5", "HOTBOARD_API_KEEP_ALIVE_S": "1"}
    with api_server(board, tmp_path, env=env) as server:
        with connect(server.port) as idle:
            assert closed_by_server(idle, within_s=5) == b"", "a connection that never sends must be closed"

        with connect(server.port) as trickle:
            trickle.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
            for _ in range(100):  # one byte every 0.1 s, far slower than the head timeout allows
                if select.select([trickle], [], [], 0.1)[0]:
                    break
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    trickle.sendall(b"a")
            status, _, body = read_response(trickle)
            assert (status, error_code(body)) == (408, "request_timeout")

        with connect(server.port) as kept:
            kept.sendall(RANK)
            assert read_response(kept)[0] == 200
            assert closed_by_server(kept, within_s=5) == b"", "an idle keep-alive connection must be closed"


def test_requests_beyond_the_cap_get_a_json_503(tmp_path: Path) -> None:
    """Every connection has a request in flight (waiting on a Redis that never answers): one more request is
    refused at once with the JSON 503, and the liveness probe is still answered."""
    env = {"HOTBOARD_API_MAX_CONNECTIONS": "3", "HOTBOARD_API_RETRY_AFTER_S": "7", "HOTBOARD_API_REDIS_TIMEOUT_S": "8"}
    with (
        silent_redis() as (redis_url, listener),
        api_server(redis_url, tmp_path, env=env) as server,
        contextlib.ExitStack() as stack,
    ):
        held = [stack.enter_context(connect(server.port)) for _ in range(3)]
        for sock in held:
            sock.sendall(RANK)
        listener.settimeout(5)
        for _ in held:  # each request has asked Redis on a connection of its own: all three are in flight
            stack.enter_context(listener.accept()[0])
        status, headers, body = ask(server.port, RANK)
        assert (status, error_code(body), headers["retry-after"]) == (503, "overloaded", "7")
        assert headers["x-content-type-options"] == "nosniff"
        assert ask(server.port, _get(b"/healthz"))[0] == 200, "the liveness probe must pass the cap"


def test_idle_connections_do_not_lock_requests_out(board: str, tmp_path: Path) -> None:
    """Connections that never sent a byte filled the cap, and every request on the pod was a 503: new clients,
    an established keep-alive client and the probes. Now idle connections are shed first, oldest first."""
    cap, extra = 20, 30
    env = {
        "HOTBOARD_API_MAX_CONNECTIONS": str(cap),
        "HOTBOARD_API_HEAD_TIMEOUT_S": "60",
        "HOTBOARD_API_KEEP_ALIVE_S": "60",
    }
    with api_server(board, tmp_path, env=env) as server, contextlib.ExitStack() as stack:
        kept = stack.enter_context(connect(server.port))
        kept.sendall(RANK)
        assert read_response(kept)[0] == 200
        idle = [stack.enter_context(connect(server.port)) for _ in range(cap + extra)]
        # accepted in order, so the server has seen every idle connection before this new client's request
        assert ask(server.port, RANK)[0] == 200, "a new client was locked out"
        kept.sendall(RANK)
        assert read_response(kept)[0] == 200, "an established keep-alive client was locked out"
        for probe in (b"/healthz", b"/readyz"):
            assert ask(server.port, _get(probe))[0] == 200, probe
        deadline = time.monotonic() + 10  # far below the head timeout: these closes are sheds
        while (shed := sum(map(shed_by_server, idle))) <= extra:  # 1 + cap + extra open, cap allowed
            assert time.monotonic() < deadline, f"only {shed} idle connections were shed"
            select.select(idle, [], [], 0.1)  # wait for the next close, bounded
        assert shed <= extra + 4, f"{shed} shed: more than the cap needed"


# --- 4. the fast path answers a Redis failure itself ------------------------------------------------------


@contextlib.contextmanager
def silent_redis() -> Iterator[tuple[str, socket.socket]]:
    """A port that completes TCP handshakes (the kernel backlog) but never answers: every command times out.
    The test accepts the queued connections afterwards to count how many the API opened."""
    listener = socket.create_server((LOOPBACK, free_port()), backlog=64)
    try:
        yield f"redis://{LOOPBACK}:{listener.getsockname()[1]}/0", listener
    finally:
        listener.close()


def accepted_connections(listener: socket.socket) -> int:
    listener.setblocking(False)
    count = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            listener.accept()[0].close()
            count += 1
    return count


def test_fast_path_answers_a_redis_timeout_once(tmp_path: Path) -> None:
    env = {"HOTBOARD_API_REDIS_TIMEOUT_S": "0.3", "HOTBOARD_API_RETRY_AFTER_S": "7"}
    with silent_redis() as (url, listener), api_server(url, tmp_path, env=env) as server:
        status, headers, body = ask(server.port, RANK)
        assert (status, error_code(body), headers["retry-after"]) == (503, "redis_unavailable", "7")
        # One attempt plus the pool's one retry, each on a new connection, and the full app repeats neither.
        assert accepted_connections(listener) == 2
        status, _, metrics = ask(server.metrics_port, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        line = 'hotboard_api_requests_total{method="GET",route="/v1/boards/{board}/players/{player}",status="503"} 1.0'
        assert status == 200 and line in metrics.decode()


# --- 5. stored data never gives a 500 ------------------------------------------------------------------


def test_out_of_range_scores_answer_saturated(redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    scores = {"inf": math.inf, "big": float(2**64), "ok": 5, "neg": float(-(2**60)), "ninf": -math.inf}
    client.zadd(keys.board_key(BOARD), scores)
    client.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1})
    client.close()
    expected = [("inf", MAX_SCORE), ("big", MAX_SCORE), ("ok", 5), ("neg", -MAX_SCORE), ("ninf", -MAX_SCORE)]
    with api_server(redis_url, tmp_path) as server:
        status, _, body = ask(server.port, b"GET /v1/boards/g/top HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == 200
        assert [(e["player"], e["score"]) for e in orjson.loads(body)["entries"]] == expected
        for target, want in [
            (b"/v1/boards/g/players/big", MAX_SCORE),
            (b"/v1/boards/g/players/ninf/around?radius=0", -MAX_SCORE),
            (b"/v1/boards/g/players?ids=inf", MAX_SCORE),
        ]:
            status, _, body = ask(server.port, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % target)
            answer = orjson.loads(body)
            assert status == 200 and answer.get("score", answer.get("entries", [{}])[0].get("score")) == want


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("version", b"abc"),
        ("version", b"1.5"),
        ("version", b"nan"),
        ("as_of", b"1e12"),
        ("as_of", b"-1"),
        ("as_of", b"99999999999999999999"),
    ],
)
def test_corrupt_meta_is_a_503_naming_the_key(redis_url: str, tmp_path: Path, field: str, raw: bytes) -> None:
    client = redis.Redis.from_url(redis_url)
    client.zadd(keys.board_key(BOARD), {"a": 1})
    client.hset(keys.meta_key(BOARD), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1, field: raw})
    client.close()
    with api_server(redis_url, tmp_path, env={"HOTBOARD_API_RETRY_AFTER_S": "7"}) as server:
        for target in (
            b"/v1/boards/g/top",
            b"/v1/boards/g/players/a",
            b"/v1/boards/g/players/a/around",
            b"/v1/boards/g/players?ids=a",
            b"/v1/boards/%67/top",
        ):
            status, headers, body = ask(server.port, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % target)
            assert (status, error_code(body), headers.get("retry-after")) == (503, "corrupt_data", "7"), target
            assert keys.meta_key(BOARD) in orjson.loads(body)["message"]


# --- 6. /readyz uses the configured Retry-After ---------------------------------------------------------


@contextlib.contextmanager
def ok_redis() -> Iterator[str]:
    """Answers ``+OK`` to every command: Redis seems to answer, but not as a read is answered."""
    listener = socket.create_server((LOOPBACK, free_port()))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while not stop.is_set() and (chunk := conn.recv(65536)):
                buffer += chunk
                while (command := _one_command(buffer)) is not None:
                    buffer = buffer[command:]
                    conn.sendall(b"+OK\r\n")

    def accept() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"redis://{LOOPBACK}:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        listener.close()


def _one_command(buffer: bytes) -> int | None:
    """Length of the first complete RESP array in ``buffer``, or None."""
    if not buffer.startswith(b"*") or b"\r\n" not in buffer:
        return None
    line = buffer.partition(b"\r\n")[0]
    pos = len(line) + 2
    for _ in range(int(line[1:])):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None
        pos = end + 2 + int(buffer[buffer.index(b"$", pos) + 1 : end]) + 2
        if pos > len(buffer):
            return None
    return pos


def test_readyz_sends_the_configured_retry_after(tmp_path: Path) -> None:
    with ok_redis() as url, api_server(url, tmp_path, env={"HOTBOARD_API_RETRY_AFTER_S": "7"}) as server:
        status, headers, _ = ask(server.port, b"GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (status, headers["retry-after"]) == (503, "7")
