"""``hotboard boards create|list|show`` in-process against a real redis-server: idempotent create, the refusal
once a board has scores, paged listing, and the exit codes scripts rely on (0, 1, 2, 3)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import redis

from cli.devstack import RedisServer
from cli.main import main
from cli.process import LOOPBACK, free_port
from hotboard import keys
from tests.integration.harness import JUNK_DEFINITIONS, seed_junk_definitions

pytestmark = pytest.mark.integration

#: The season fields of a board that never resets.
NEVER = {"reset": "never", "keep": 4, "grace_ms": 60_000}

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_then_same_create_is_unchanged(redis_url: str, sync_redis: redis.Redis, capsys: Capture) -> None:
    code, out, _ = run(
        capsys, "boards", "create", "speed", "--order", "asc", "--operator", "best", "--redis", redis_url
    )
    assert code == 0 and out == "created speed: asc/best/shared\n"
    stored = sync_redis.hgetall(keys.def_key("speed"))
    assert stored[b"spec"] == b"asc/best/shared" and stored[b"order"] == b"asc" and int(stored[b"created"]) > 0
    code, out, _ = run(
        capsys, "boards", "create", "speed", "--order", "asc", "--operator", "best", "--json", "--redis", redis_url
    )
    assert code == 0
    assert json.loads(out) == {
        "board": "speed",
        "outcome": "unchanged",
        "order": "asc",
        "operator": "best",
        "ties": "shared",
        **NEVER,
        "spec": "asc/best/shared",
        "previous": "asc/best/shared",
        "changed": {},
        "defaulted": [],
    }


def test_redis_from_the_environment(redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Capture) -> None:
    monkeypatch.setenv("HOTBOARD_REDIS", redis_url)
    assert run(capsys, "boards", "create", "g")[:2] == (0, "created g: desc/incr/shared\n")


def test_changing_ties_of_an_empty_declared_board_is_allowed(redis_url: str, capsys: Capture) -> None:
    assert run(capsys, "boards", "create", "b", "--ties", "dense", "--redis", redis_url)[0] == 0
    code, out, _ = run(capsys, "boards", "create", "b", "--ties", "earliest", "--redis", redis_url)
    assert code == 0 and out == "replaced b: desc/incr/earliest (was desc/incr/dense)\n  ties: dense -> earliest\n"


def test_replacing_says_which_options_not_given_went_back_to_their_defaults(redis_url: str, capsys: Capture) -> None:
    """A create replaces the whole definition: an option left out is its default again, and the output says so
    field by field, the old value beside the new one."""
    declared = ["--order", "asc", "--operator", "best", "--reset", "daily", "--keep", "2"]
    assert run(capsys, "boards", "create", "b", *declared, "--redis", redis_url)[0] == 0
    code, out, _ = run(capsys, "boards", "create", "b", "--ties", "dense", "--redis", redis_url)
    assert code == 0
    assert out.splitlines() == [
        "replaced b: desc/incr/dense (was asc/best/shared|daily|2|60000)",
        "  order: asc -> desc (not given: the default)",
        "  operator: best -> incr (not given: the default)",
        "  ties: shared -> dense",
        "  reset: daily -> never (not given: the default)",
        "  keep: 2 -> 4 (not given: the default)",
    ]
    assert run(capsys, "boards", "create", "b", "--order", "asc", "--redis", redis_url)[0] == 0
    code, out, _ = run(capsys, "boards", "create", "b", "--order", "asc", "--json", "--redis", redis_url)
    assert code == 0 and json.loads(out)["changed"] == {} and json.loads(out)["outcome"] == "unchanged"
    run(capsys, "boards", "create", "b", "--order", "asc", "--ties", "dense", "--redis", redis_url)
    code, out, _ = run(capsys, "boards", "create", "b", "--json", "--redis", redis_url)
    assert json.loads(out)["changed"] == {"order": ["asc", "desc"], "ties": ["dense", "shared"]}
    assert json.loads(out)["defaulted"] == ["order", "ties"]


@pytest.mark.parametrize("written", ["zset", "meta"])
def test_changing_a_board_with_scores_is_refused(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture, written: str
) -> None:
    assert run(capsys, "boards", "create", "b", "--ties", "dense", "--redis", redis_url)[0] == 0
    if written == "zset":
        sync_redis.zadd(keys.board_key("b"), {"alice": 5})
    else:
        sync_redis.hset(keys.meta_key("b"), mapping={keys.META_VERSION: 1, keys.META_AS_OF: 1})
    code, out, err = run(capsys, "boards", "create", "b", "--ties", "shared", "--redis", redis_url)
    assert code == 2 and out == ""
    assert "desc/incr/dense" in err and "desc/incr/shared" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert sync_redis.hget(keys.def_key("b"), "spec") == b"desc/incr/dense"
    # The same definition is still fine on a written board.
    assert run(capsys, "boards", "create", "b", "--ties", "dense", "--redis", redis_url)[:2] == (
        0,
        "unchanged b: desc/incr/dense\n",
    )


def test_undeclared_board_with_scores_keeps_the_default(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture
) -> None:
    sync_redis.zadd(keys.board_key("old"), {"alice": 5})
    code, _, err = run(capsys, "boards", "create", "old", "--order", "asc", "--redis", redis_url)
    assert code == 2 and "desc/incr/shared" in err and "asc/incr/shared" in err
    assert not sync_redis.exists(keys.def_key("old"))
    # Declaring the default it already has is allowed and records it.
    code, out, _ = run(capsys, "boards", "create", "old", "--redis", redis_url)
    assert code == 0 and out == "created old: desc/incr/shared\n"


def test_invalid_name_and_choice_exit_2(redis_url: str, capsys: Capture) -> None:
    code, _, err = run(capsys, "boards", "create", "no spaces", "--redis", redis_url)
    assert code == 2 and "1-64 characters" in err
    assert run(capsys, "boards", "show", "x" * 65, "--redis", redis_url)[0] == 2
    with pytest.raises(SystemExit) as exit_:
        main(["boards", "create", "b", "--ties", "fair", "--redis", redis_url])
    assert exit_.value.code == 2
    assert "shared" in capsys.readouterr().err


def test_list_walks_every_page(redis_url: str, sync_redis: redis.Redis, capsys: Capture) -> None:
    assert run(capsys, "boards", "list", "--redis", redis_url) == (0, "", "")
    assert run(capsys, "boards", "list", "--json", "--redis", redis_url)[:2] == (0, "[]\n")
    names = [f"b{i:03d}" for i in range(250)]
    for name in names[:-1]:
        assert run(capsys, "boards", "create", name, "--redis", redis_url)[0] == 0
    assert run(capsys, "boards", "create", names[-1], "--ties", "lexical", "--redis", redis_url)[0] == 0
    sync_redis.zadd(keys.BOARD_INDEX_KEY, {"flushed-only": 0})  # flushed by a worker, never declared

    code, out, _ = run(capsys, "boards", "list", "--page-size", "7", "--redis", redis_url)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 251
    assert lines[0] == "b000\tdesc/incr/shared" and lines[249] == "b249\tdesc/incr/lexical"
    assert lines[250] == "flushed-only\tdesc/incr/shared"

    code, out, _ = run(capsys, "boards", "list", "--json", "--redis", redis_url)  # default page size, 3 pages
    rows = json.loads(out)
    assert code == 0 and [r["board"] for r in rows] == [*names, "flushed-only"]
    assert rows[249] == {
        "board": "b249",
        "order": "desc",
        "operator": "incr",
        "ties": "lexical",
        **NEVER,
        "spec": "desc/incr/lexical",
    }
    assert run(capsys, "boards", "list", "--page-size", "0", "--redis", redis_url)[0] == 2


def test_show_text_and_json(redis_url: str, sync_redis: redis.Redis, capsys: Capture) -> None:
    assert run(capsys, "boards", "create", "race", "--order", "asc", "--ties", "dense", "--redis", redis_url)[0] == 0
    code, out, _ = run(capsys, "boards", "show", "race", "--json", "--redis", redis_url)
    info = json.loads(out)
    assert code == 0 and info["created"] > 0
    assert info == {
        "board": "race",
        "order": "asc",
        "operator": "incr",
        "ties": "dense",
        **NEVER,
        "spec": "asc/incr/dense",
        "declared": True,
        "created": info["created"],
        "size": 0,
        "version": None,
        "as_of": None,
    }

    sync_redis.zadd(keys.board_key("race"), {"a": 1, "b": 2, "c": 3})
    sync_redis.hset(keys.meta_key("race"), mapping={keys.META_VERSION: 4, keys.META_AS_OF: 1_700_000_000_123})
    code, out, _ = run(capsys, "boards", "show", "race", "--redis", redis_url)
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0
    assert fields["spec"] == "asc/incr/dense" and fields["declared"] == "yes" and fields["size"] == "3"
    assert fields["version"] == "4" and fields["as_of"] == "1700000000123"


def test_show_an_undeclared_board_with_scores(redis_url: str, sync_redis: redis.Redis, capsys: Capture) -> None:
    sync_redis.zadd(keys.board_key("global"), {"a": 1})
    code, out, _ = run(capsys, "boards", "show", "global", "--json", "--redis", redis_url)
    info = json.loads(out)
    assert code == 0 and info["spec"] == "desc/incr/shared" and info["declared"] is False
    assert info["size"] == 1 and info["created"] is None


def test_show_an_unknown_board_exits_1(redis_url: str, capsys: Capture) -> None:
    code, out, err = run(capsys, "boards", "show", "nope", "--redis", redis_url)
    assert code == 1 and out == "" and "no board 'nope'" in err


@pytest.mark.parametrize("argv", [["create", "b"], ["list"], ["show", "b", "--json"]])
def test_unreachable_redis_exits_3_in_one_line(argv: list[str], capsys: Capture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    code, out, err = run(capsys, "boards", *argv, "--redis", url)
    assert code == 3 and out == ""
    assert err.startswith(f"hotboard boards {argv[0]}: Redis unreachable at {url}")
    assert len(err.strip().splitlines()) == 1


def test_malformed_redis_url_exits_2(capsys: Capture) -> None:
    code, _, err = run(capsys, "boards", "list", "--redis", "http://nowhere")
    assert code == 2 and "invalid --redis" in err


SEASON = ["--reset", "weekly", "--keep", "8", "--grace-ms", "300000"]


def test_create_and_show_a_seasonal_board(redis_url: str, sync_redis: redis.Redis, capsys: Capture) -> None:
    code, out, _ = run(capsys, "boards", "create", "race", *SEASON, "--redis", redis_url)
    assert code == 0 and out == "created race: desc/incr/shared|weekly|8|300000\n"
    stored = sync_redis.hgetall(keys.def_key("race"))
    assert (stored[b"reset"], stored[b"keep"], stored[b"grace_ms"]) == (b"weekly", b"8", b"300000")
    code, out, _ = run(capsys, "boards", "show", "race", "--json", "--redis", redis_url)
    info = json.loads(out)
    assert code == 0 and (info["reset"], info["keep"], info["grace_ms"]) == ("weekly", 8, 300_000)
    fields = dict(
        line.split(None, 1) for line in run(capsys, "boards", "show", "race", "--redis", redis_url)[1].splitlines()
    )
    assert (fields["reset"], fields["keep"], fields["grace_ms"]) == ("weekly", "8", "300000")
    code, out, _ = run(capsys, "boards", "list", "--redis", redis_url)
    assert code == 0 and out == "race\tdesc/incr/shared|weekly|8|300000\n"
    row = json.loads(run(capsys, "boards", "list", "--json", "--redis", redis_url)[1])[0]
    assert (row["reset"], row["keep"], row["grace_ms"]) == ("weekly", 8, 300_000)
    # A cron reset is stored in its canonical spelling.
    code, out, _ = run(capsys, "boards", "create", "hourly7", "--reset", " 0  7 * * * ", "--redis", redis_url)
    assert code == 0 and out == "created hourly7: desc/incr/shared|0 7 * * *|4|60000\n"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--reset", "fortnightly"], "reset 'fortnightly'"),
        (["--reset", "0 7 30 2 *"], "never fires"),
        (["--reset", "H 7 * * *"], "not deterministic"),
        (["--reset", "weekly", "--keep", "-1"], "keep must be"),
        (["--reset", "weekly", "--keep", "1001"], "keep must be"),
        (["--reset", "daily", "--grace-ms", "-5"], "grace_ms"),
    ],
)
def test_invalid_season_flags_exit_2(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture, flags: list[str], message: str
) -> None:
    code, out, err = run(capsys, "boards", "create", "race", *flags, "--redis", redis_url)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
    assert not sync_redis.exists(keys.def_key("race"))


def test_season_changes_are_refused_once_a_period_was_written(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture
) -> None:
    assert run(capsys, "boards", "create", "race", *SEASON, "--redis", redis_url)[0] == 0
    code, out, _ = run(capsys, "boards", "create", "race", *SEASON[:3], "9", *SEASON[4:], "--redis", redis_url)
    assert (
        code == 0
        and out
        == "replaced race: desc/incr/shared|weekly|9|300000 (was desc/incr/shared|weekly|8|300000)\n  keep: 8 -> 9\n"
    )
    sync_redis.hset(keys.meta_key("race"), "seasonal", 1)  # the worker marks B's meta at the first period
    for flags in (
        ["--reset", "weekly", "--keep", "8"],
        ["--reset", "daily", "--keep", "9"],
        ["--reset", "weekly", "--keep", "9", "--grace-ms", "0"],
        ["--reset", "never"],
        [*SEASON[:3], "9", *SEASON[4:], "--ties", "dense"],
    ):
        code, out, err = run(capsys, "boards", "create", "race", *flags, "--redis", redis_url)
        assert code == 2 and out == "" and "desc/incr/shared|weekly|9|300000" in err, flags
    assert sync_redis.hget(keys.def_key("race"), "spec") == b"desc/incr/shared|weekly|9|300000"
    code, out, _ = run(capsys, "boards", "create", "race", *SEASON[:3], "9", *SEASON[4:], "--redis", redis_url)
    assert (code, out) == (0, "unchanged race: desc/incr/shared|weekly|9|300000\n")


#: A password with every character a URL parser trips on, unencoded; each fragment between them is long enough
#: that finding it in the output means the password leaked, not a coincidence.
PASSWORD = "Zq8xK2/pW9vT4#mR7nL5?hJ3gF6@bN1cD8:yU2eA4%Ej7"
FRAGMENTS = re.split(r"[/#?@:%]", PASSWORD)
COMMANDS = [["create", "b"], ["list"], ["show", "b"], ["list", "--json"], ["show", "b", "--json"]]


def _url(port: int, password: str = quote(PASSWORD, safe=""), user: str = "hb") -> str:
    return f"redis://{user}:{password}@127.0.0.1:{port}/0"


def _assert_no_password(out: str, err: str) -> None:
    for text in (out, err):
        assert PASSWORD not in text and quote(PASSWORD, safe="") not in text
        leaked = [f for f in FRAGMENTS if f in text]
        assert not leaked, (leaked, text)


@pytest.fixture
def acl_port(redis_server: RedisServer) -> Iterator[int]:
    """A redis-server of its own with a user ``hb`` (every command) and ``noperm`` (may log in, nothing else),
    both with :data:`PASSWORD`."""
    admin = redis.Redis(port=redis_server.port)
    try:
        admin.acl_setuser("hb", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], commands=["+@all"])
        admin.acl_setuser("noperm", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], commands=["-@all", "+client"])
        yield redis_server.port
    finally:
        admin.close()


@pytest.mark.parametrize("argv", COMMANDS)
def test_no_error_path_prints_the_redis_password(argv: list[str], acl_port: int, capsys: Capture) -> None:
    """Every way ``hotboard boards`` can fail, each with a password in --redis (and in HOTBOARD_REDIS): the
    password, encoded or not, and no fragment of it, appears in what it prints; the user name and host do."""
    cases = [
        # a password left unencoded: redis-py's own message quotes a piece of it ("Port could not be cast ...")
        (f"redis://hb:{PASSWORD}@127.0.0.1:{acl_port}/0", 2),
        (_url(acl_port).replace("redis://", "http://"), 2),  # not a Redis scheme
        (_url(acl_port).replace("127.0.0.1", "[::1"), 2),  # not a URL
        (_url(free_port()), 3),  # unreachable
        (_url(acl_port, quote("wrong" + PASSWORD, safe="")), 3),  # refused credentials
        (_url(acl_port, user="noperm"), 3),  # logged in, every command refused (NOPERM)
        (f"redis://127.0.0.1:{free_port()}/0?password={quote(PASSWORD, safe='')}", 3),
    ]
    # whitespace left unencoded in the password: free text would end the URL there
    spaced = "Vb7nM2kL9 Qw3rTy8uI1 Zx5cF4gH6"
    for url in (f"redis://hb:{spaced}@127.0.0.1:{acl_port}/0", f"redis://hb:{spaced}@127.0.0.1:{free_port()}/0"):
        got, out, err = run(capsys, "boards", *argv, "--redis", url)
        assert got in (2, 3) and not [f for f in spaced.split() if f in out + err], (url, err)
    for url, code in cases:
        got, out, err = run(capsys, "boards", *argv, "--redis", url)
        assert got == code and out == "", (url, got, out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        _assert_no_password(out, err)
        if "noperm" in url:  # the error path of a reply, not of the connection
            assert "Redis error" in err and "no permissions" in err
        elif code == 3:
            assert "***@127.0.0.1" in err or "password=***" in err


def test_a_redis_that_never_answers_times_out_without_printing_the_password(capsys: Capture) -> None:
    """The timeout branch: connected (the kernel accepts into the backlog), then no reply within 5 s, twice."""
    with socket.create_server((LOOPBACK, 0)) as silent:
        url = _url(silent.getsockname()[1])
        got, out, err = run(capsys, "boards", "list", "--redis", url)
    assert got == 3 and out == "" and "hb:***@127.0.0.1" in err and len(err.splitlines()) == 1
    _assert_no_password(out, err)


def test_refusals_and_successes_do_not_print_the_password_either(
    acl_port: int, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(acl_port)
    for argv, code in [
        (["create", "b"], 0),
        (["create", "b", "--ties", "dense"], 0),
        (["list"], 0),
        (["show", "b"], 0),
        (["show", "nope"], 1),
        (["list", "--page-size", "0"], 2),
        (["show", "no spaces"], 2),
        (["create", "b", "--reset", "fortnightly"], 2),
    ]:
        got, out, err = run(capsys, "boards", *argv, "--redis", url)
        assert got == code, (argv, out, err)
        _assert_no_password(out, err)
    monkeypatch.setenv("HOTBOARD_REDIS", _url(free_port()))
    got, out, err = run(capsys, "boards", "list")
    assert got == 3 and "hb:***@127.0.0.1" in err
    _assert_no_password(out, err)


def test_list_escapes_control_characters_in_text_and_keeps_json_exact(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture
) -> None:
    """Index members are whatever anyone wrote: printed raw, an escape sequence retitles or clears the terminal
    and a newline forges a row. Text output escapes them; JSON output is exact JSON of the stored name."""
    names = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[Hclear", "forged\nrow\tdesc/incr/shared", "rtl\u202etxt", "back\\x1b"]
    sync_redis.zadd(keys.BOARD_INDEX_KEY, dict.fromkeys(names, 0))
    code, out, _ = run(capsys, "boards", "list", "--redis", redis_url)
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(names)
    assert all(line.count("\t") == 1 and line.replace("\t", " ").isprintable() for line in lines), lines
    shown = {line.split("\t")[0] for line in lines}
    assert shown == {
        "\\x1b]0;pwned\\x07",
        "\\x1b[2J\\x1b[Hclear",
        "forged\\x0arow\\x09desc/incr/shared",
        "rtl\\u202etxt",
        "back\\\\x1b",
    }
    code, out, _ = run(capsys, "boards", "list", "--json", "--redis", redis_url)
    assert code == 0 and sorted(row["board"] for row in json.loads(out)) == sorted(names)


def test_list_shows_what_it_cannot_read_and_pages_past_it(
    redis_url: str, sync_redis: redis.Redis, capsys: Capture
) -> None:
    """An index member that is not UTF-8 and definitions hotboard did not write are listed as unreadable, by a
    printable name and the reason, so an operator can find and remove them; paging goes on past them, even
    with a page boundary on the non-UTF-8 member."""
    seed_junk_definitions(redis_url)
    sync_redis.zadd(
        keys.BOARD_INDEX_KEY, {b"a-good": 0, b"b\xff\xfe": 0, b"c-good": 0, **dict.fromkeys(JUNK_DEFINITIONS, 0)}
    )
    for page_size in ("1", "2", "100"):
        code, out, _ = run(capsys, "boards", "list", "--page-size", page_size, "--redis", redis_url)
        rows = dict(line.split("\t") for line in out.splitlines())
        assert code == 0, out
        assert set(rows) == {"a-good", "b\\\\xff\\\\xfe", "c-good", *JUNK_DEFINITIONS}
        assert rows["a-good"] == rows["c-good"] == "desc/incr/shared"
        # escape() marks the backslashes of the printable name
        assert rows["b\\\\xff\\\\xfe"] == "unreadable: not a board name"
        assert all(rows[board].startswith(f"unreadable: hb:{{{board}}}:def") for board in JUNK_DEFINITIONS), rows
    code, out, _ = run(capsys, "boards", "list", "--json", "--redis", redis_url)
    listed = {row["board"]: row for row in json.loads(out)}
    assert code == 0 and listed["b\\xff\\xfe"]["error"] == "not a board name" and "error" in listed["junk-keep"]
