"""Pure logic of the read API: parameter rules, path decoding, reply parsing, response shapes, the cache."""

from __future__ import annotations

import importlib
import pkgutil
from typing import get_type_hints

import pytest

import reader_api
from hotboard.script import Script
from reader_api import snapshot
from reader_api.cache import PageCache
from reader_api.errors import ApiError
from reader_api.fastpath import QUERY_KEYS
from reader_api.metrics import UNMATCHED, ApiMetrics, route_template
from reader_api.openapi import document
from reader_api.params import ENCODED_SLASH, MAX_IDS, check_board, check_player, ids_param, int_param, parse_ids
from reader_api.paths import rewrite
from reader_api.routes import ALL_ENDPOINTS, AROUND, ENDPOINTS, PLAYER, ROUTES, TOP, routes
from reader_api.snapshot import Header, parse_page, parse_score

#: The header every read script's reply starts with: exists, total, meta version, meta as_of, order, ties.
KNOWN = [1, 3, b"7", b"1234", b"desc", b"shared"]
UNKNOWN = [0, 0, None, None, b"desc", b"shared"]
EARLIEST_DESC = [1, 3, b"7", b"1234", b"desc", b"earliest"]


def raises(status: int, parameter: str | None = None) -> pytest.RaisesExc[ApiError]:
    return pytest.raises(ApiError, check=lambda e: e.status == status and e.parameter == parameter)


@pytest.mark.parametrize("board", ["global", "a:b.c-d_9", "x" * 64])
def test_valid_boards(board: str) -> None:
    assert check_board(board) == board


@pytest.mark.parametrize("board", ["", "x" * 65, "a b", "a/b", "é", "a\x1fb"])
def test_invalid_boards(board: str) -> None:
    with raises(422, "board"):
        check_board(board)


def test_players_follow_the_event_contract() -> None:
    assert check_player("x y") == "x y"
    assert check_player(f"a{ENCODED_SLASH}b") == "a/b"
    assert check_player("p" * 128) == "p" * 128
    for bad in ("", "p" * 129, "a\nb", "a\x00", "\x9f"):
        with raises(422, "player"):
            check_player(bad)


def test_parse_ids() -> None:
    assert parse_ids("a,b,a,x y") == ["a", "b", "x y"]
    assert parse_ids(",".join(f"p{i}" for i in range(MAX_IDS))) == [f"p{i}" for i in range(MAX_IDS)]
    for bad in ("", "a,,b", "a,", ",".join(f"p{i}" for i in range(MAX_IDS + 1)), "a\tb"):
        with raises(422, "ids"):
            parse_ids(bad)


def test_encoded_slash_stays_inside_its_segment() -> None:
    assert rewrite(b"/v1/boards/b/players/a%2Fb/around") == f"/v1/boards/b/players/a{ENCODED_SLASH}b/around"
    assert rewrite(b"/v1/boards/b/players/x%20y%2f?q=1") == f"/v1/boards/b/players/x y{ENCODED_SLASH}"
    # A real \x1f must not alias "/": it becomes NUL, which no valid id contains.
    assert rewrite(b"/v1/boards/b/players/a%1Fb") == "/v1/boards/b/players/a\x00b"


@pytest.mark.parametrize(
    ("raw", "score"),
    [
        (b"-42", -42),
        (b"9007199254740991", 2**53 - 1),
        (b"-9007199254740991", -(2**53 - 1)),
        (b"9007199254740992", 2**53 - 1),
        (b"1e+17", 2**53 - 1),
        (b"1.8446744073709552e+19", 2**53 - 1),
        (b"inf", 2**53 - 1),
        (b"-inf", -(2**53 - 1)),
        (b"nan", 0),
        (b"2.5", 2),
        (b"-2.5", -2),
    ],
)
def test_every_stored_score_has_an_integer_answer(raw: bytes, score: int) -> None:
    """Exact within +-(2^53 - 1), saturated beyond (docs/api.md, "Answers")."""
    assert parse_score(raw) == score


def test_scores_and_pages() -> None:
    header = Header(exists=True, total=3, version=1, as_of=None)
    page = [[b"a", "b"], [b"5", "-1"], [11, 12], []]
    assert parse_page(header, "g", page) == [
        {"rank": 11, "player": "a", "score": 5, "meta": None},
        {"rank": 12, "player": "b", "score": -1, "meta": None},
    ]
    negated = Header(exists=True, total=3, version=1, as_of=None, sign=-1)
    with_meta = [[b"a", b"b"], [b"-5", b"3"], [1, 2], [b'{"name":"A"}', None]]
    assert parse_page(negated, "g", with_meta) == [
        {"rank": 1, "player": "a", "score": 5, "meta": {"name": "A"}},
        {"rank": 2, "player": "b", "score": -3, "meta": None},
    ]


@pytest.mark.parametrize("raw", [b"[1]", b"nope", b'"s"', b"", b"{"])
def test_corrupt_player_meta_is_a_503_naming_the_key(raw: bytes) -> None:
    with pytest.raises(ApiError, check=lambda e: e.status == 503 and "hb:{g}:pmeta" in e.message):
        parse_page(Header(exists=True, total=1, version=1, as_of=None), "g", [[b"a"], [b"1"], [1], [raw]])
    with pytest.raises(ApiError, check=lambda e: e.status == 503 and "hb:{g}:pmeta" in e.message):
        snapshot.player("g", "a", [*KNOWN, 1, b"1", raw])


@pytest.mark.parametrize(
    ("order", "ties", "sign"),
    [(b"desc", b"earliest", -1), (b"asc", b"earliest", 1), (b"desc", b"shared", 1), (b"asc", b"dense", 1)],
)
def test_the_definition_in_the_reply_gives_the_sign(order: bytes, ties: bytes, sign: int) -> None:
    assert snapshot.parse_header([1, 1, None, None, order, ties], "g").sign == sign


@pytest.mark.parametrize(("order", "ties"), [(b"up", b"shared"), (b"desc", b"fair")])
def test_a_corrupt_definition_is_a_503_naming_the_key(order: bytes, ties: bytes) -> None:
    with pytest.raises(ApiError, check=lambda e: e.status == 503 and "hb:{g}:def" in e.message):
        snapshot.parse_header([1, 1, None, None, order, ties], "g")


def test_shapes() -> None:
    header, page = snapshot.top("g", [*KNOWN, [[b"a"], [b"5"], [1], [b'{"c":"FR"}']]])
    assert header == Header(exists=True, total=3, version=7, as_of=1234)
    assert page == {
        "board": "g",
        "total": 3,
        "entries": [{"rank": 1, "player": "a", "score": 5, "meta": {"c": "FR"}}],
        "as_of": 1234,
    }
    assert snapshot.player("g", "a", [*KNOWN, 2, b"1"]) == {
        "board": "g",
        "player": "a",
        "rank": 2,
        "score": 1,
        "meta": None,
        "total": 3,
        "as_of": 1234,
    }
    assert snapshot.player("g", "a", [*EARLIEST_DESC, 1, b"-9", b"{}"])["score"] == 9
    near = snapshot.around("g", "a", [*KNOWN, 0, [[b"b", b"a"], [b"9", b"1"], [1, 2], []]])
    assert near["player"] == "a" and [e["rank"] for e in near["entries"]] == [1, 2]
    # Equal ranks keep the order asked; missing ids are listed in the order asked.
    reply = [*KNOWN, [[b"x", b"b", b"c", b"zz"], [b"1", b"9", b"9", None], [3, 1, 1, None], []]]
    friends = snapshot.players("g", ["x", "b", "c", "zz"], reply)
    assert [e["player"] for e in friends["entries"]] == ["b", "c", "x"]
    assert friends["missing"] == ["zz"] and friends["total"] == 3


def test_board_info() -> None:
    declared = snapshot.board_info("g", [1, 2, b"3", b"4", 1, b"asc/best/dense"])
    assert declared == {
        "board": "g",
        "order": "asc",
        "operator": "best",
        "ties": "dense",
        "reset": "never",
        "keep": 4,
        "grace_ms": 60_000,
        "declared": True,
        "size": 2,
        "as_of": 4,
        "version": 3,
    }
    assert snapshot.board_info("g", [0, 0, None, None, 1, b"desc/set/earliest"])["size"] == 0
    default = snapshot.board_info("g", [1, 5, None, None, 0, None])
    assert (default["order"], default["ties"], default["declared"], default["as_of"]) == ("desc", "shared", False, None)
    with raises(404):
        snapshot.board_info("g", [0, 0, None, None, 0, None])
    with pytest.raises(ApiError, check=lambda e: e.status == 503 and "hb:{g}:def" in e.message):
        snapshot.board_info("g", [1, 0, None, None, 1, None])


def test_unknown_board_and_player_are_404() -> None:
    with raises(404):
        snapshot.top("g", [*UNKNOWN, [[], [], [], []]])
    with raises(404):
        snapshot.player("g", "a", KNOWN)
    with raises(404):
        snapshot.around("g", "a", KNOWN)
    with raises(404):
        snapshot.players("g", ["a"], [*UNKNOWN, [[b"a"], [None], [None], []]])
    # A known but empty board (meta only) answers, with total 0.
    assert snapshot.top("g", [1, 0, b"1", b"5", b"desc", b"shared", [[], [], [], []]])[1]["entries"] == []


def test_integer_parameters() -> None:
    assert int_param({}, "limit") == 100 and int_param({}, "radius") == 5 and int_param({}, "offset") == 0
    assert int_param({"limit": "1000"}, "limit") == 1000
    assert int_param({"offset": "+7"}, "offset") == 7
    assert int_param({"offset": "9" * 30}, "offset") == int("9" * 30)
    for name, raw in [
        ("limit", "0"),
        ("limit", "1001"),
        ("limit", "1_0"),
        ("limit", " 10"),
        ("limit", "1.5"),
        ("offset", "-1"),
        ("radius", "101"),
        ("radius", ""),
        ("radius", "x"),
    ]:
        with raises(422, name):
            int_param({name: raw}, name)
    with raises(422, "ids"):
        ids_param({})


def test_openapi_document_covers_every_endpoint() -> None:
    doc = document("t", "1", "d", 8192)
    assert set(doc["paths"]) == {
        "/v1/boards/{board}/top",
        "/v1/boards/{board}/players/{player}",
        "/v1/boards/{board}/players/{player}/around",
        "/v1/boards/{board}/players",
        "/v1/boards",
        "/v1/boards/{board}",
        "/v1/boards/{board}/periods",
        "/v1/boards/{board}/top/stream",
        "/v1/boards/{board}/players/{player}/around/stream",
        "/healthz",
        "/readyz",
    }
    streamed = doc["paths"]["/v1/boards/{board}/top/stream"]["get"]["responses"]["200"]["content"]
    assert set(streamed) == {"text/event-stream"}
    limit = doc["paths"]["/v1/boards/{board}/top"]["get"]["parameters"][1]
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
    assert {"TopPage", "Entry", "ErrorBody", "BoardList", "BoardSummary", "BoardInfo"} <= set(
        doc["components"]["schemas"]
    )
    after = doc["paths"]["/v1/boards"]["get"]["parameters"][1]
    assert after["name"] == "after" and after["schema"]["type"] == "string"
    meta = doc["components"]["schemas"]["Entry"]["properties"]["meta"]
    assert meta["anyOf"] == [{"type": "object"}, {"type": "null"}]


def test_cache_is_a_bounded_lru() -> None:
    cache = PageCache(max_entries=2, max_bytes=100)
    cache.put(("g", 0, 1), 1, b"a" * 10)
    cache.put(("g", 0, 2), 1, b"b" * 10)
    assert cache.get(("g", 0, 1)) is not None  # now most recent
    cache.put(("g", 0, 3), 1, b"c" * 10)
    assert cache.get(("g", 0, 2)) is None and cache.size == 2
    cache.put(("g", 0, 4), 2, b"d" * 95)
    assert cache.size == 1 and cache.total_bytes == 95
    cache.put(("g", 0, 5), 2, b"e" * 101)  # larger than the whole cache: not kept
    assert cache.get(("g", 0, 5)) is None
    cache.put(("g", 0, 4), 3, b"f")
    page = cache.get(("g", 0, 4))
    assert page is not None and page.version == 3 and cache.total_bytes == 1
    assert not PageCache(0, 100).enabled


def test_metric_labels_are_bounded() -> None:
    metrics = ApiMetrics()
    metrics.observe("/v1/boards/{board}/top", "BREW", 200, 0.001)
    sample = metrics.registry.get_sample_value(
        "hotboard_api_requests_total", {"route": "/v1/boards/{board}/top", "method": "other", "status": "200"}
    )
    assert sample == 1.0
    assert route_template({"type": "http"}) == UNMATCHED


def test_one_route_table_feeds_routing_the_fast_path_and_the_document() -> None:
    doc = document("t", "1", "d", 8192, writes=True)
    assert [route.path for route in ROUTES] == [e.path for e in ENDPOINTS]
    served = [(r.path, (r.methods or set()) - {"HEAD"}) for r in routes(True)]
    assert served == [(e.path, {e.method}) for e in ALL_ENDPOINTS]
    waits = {"after", "wait_ms"}
    assert QUERY_KEYS == {
        TOP: {"limit", "offset", "period", *waits},
        PLAYER: {"period", *waits},
        AROUND: {"radius", "period", *waits},
    }
    for e in ALL_ENDPOINTS:
        if e.doc is not None:
            parameters = doc["paths"][e.path][e.method.lower()].get("parameters", [])
            names = [p["name"] for p in parameters if p["in"] != "header"]
            assert names == [*e.params, *e.query]
            schema = doc["components"]["schemas"][e.doc.answer.__name__]
            assert set(get_type_hints(e.doc.answer)) == set(schema["properties"])


def test_a_flood_of_one_off_pages_does_not_evict_a_popular_one() -> None:
    """The key holds offset and limit, so any client could empty an LRU with tiny distinct pages: pages asked
    once only churn among themselves; a page asked again is kept over them."""
    cache = PageCache(max_entries=10, max_bytes=1 << 20)
    hot = ("g", 0, 10)
    cache.put(hot, 1, b"hot")
    assert cache.get(hot) is not None  # asked a second time: popular
    for offset in range(1000):  # each asked once, as a flood of ?limit=1&offset=N would
        assert cache.get(("g", offset, 1)) is None
        cache.put(("g", offset, 1), 1, b"x")
    assert cache.get(hot) is not None and cache.size == 10
    cache.put(hot, 2, b"hot, newer")  # a new version keeps its place
    for offset in range(1000, 1100):
        cache.put(("g", offset, 1), 1, b"x")
    page = cache.get(hot)
    assert page is not None and page.version == 2


def test_every_script_the_api_runs_is_flagged_no_writes() -> None:
    """Redis itself refuses a write from a script flagged ``no-writes``, whatever the user may do: the API's
    "never writes" holds on an unrestricted Redis user too, not only on the read-only ACL user of the deploys."""
    modules = [importlib.import_module(f"reader_api.{m.name}") for m in pkgutil.iter_modules(reader_api.__path__)]
    scripts = [v for module in modules for v in vars(module).values() if isinstance(v, Script)]
    assert len(scripts) >= 5
    assert all(s.text.startswith("#!lua flags=no-writes\n") for s in scripts), [s.text[:30] for s in scripts]
