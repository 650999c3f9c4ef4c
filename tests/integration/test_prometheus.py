"""A real Prometheus (Debian package ``prometheus``) scrapes a real worker under load, and the read API: every
PromQL expression of the Grafana dashboard and of the alert rules must return data (no typo'd metric name,
no wrong label), the rules must evaluate without errors, and promtool must accept the shipped files.

Alert expressions are compared against thresholds, so they are empty while all is well. They are checked
in parts instead: each top-level operand of ``and``/``or``/``unless`` with its comparison removed (the
quantity the alert watches) and each vector selector inside must return data.

HOTBOARD_RENDER_DASHBOARD=1 also runs a longer, stepped load and renders docs/dashboard.png from this run's
Prometheus with scripts/render_dashboard.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from archive.archiver import Archiver
from archive.settings import ArchiverSettings
from cli.loadgen import generate, publish
from cli.process import LOOPBACK, Child, free_port, url_answers
from hotboard.keys import board_key
from ingest.settings import WorkerSettings
from ingest.worker import Worker
from tests.integration.reader_harness import api_server
from tests.services import unavailable

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "hotboard.json"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD_PNG = ROOT / "docs" / "dashboard.png"
RENDER_ENV = "HOTBOARD_RENDER_DASHBOARD"

#: Grafana's built-in variables, as concrete durations for a 1 s scrape interval.
GRAFANA_VARS = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}
BAD_RECORDS = [(b"bad-1", b"not json"), (b"bad-2", b"[1]"), (b"bad-3", b'{"board": "global", "delta": 1}')]
QUERY_DEADLINE_S = 120.0


# ------------------------------------------------------------------------------------------------ PromQL helpers


def grafana_exprs() -> list[str]:
    exprs: list[str] = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            exprs += [t["expr"] for t in p.get("targets", [])]
    assert exprs
    return [substitute(e) for e in exprs]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def substitute(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def is_api(expr: str) -> bool:
    return "hotboard_api_" in expr or "hotboard-api" in expr


def is_archive(expr: str) -> bool:
    return "hotboard_archive_" in expr or "hotboard-archiver" in expr


def _scan(expr: str) -> Iterator[tuple[int, str, int]]:
    """(index, char, bracket depth) for every character outside string literals."""
    depth = 0
    quote = ""
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        else:
            yield i, c, depth
        i += 1


def split_top_level(expr: str) -> list[str]:
    """Split at the top-level set operators ``and``/``or``/``unless`` (not inside parentheses)."""
    parts: list[str] = []
    start = 0
    for i, _, depth in _scan(expr):
        if depth or i < start or (i and (expr[i - 1].isalnum() or expr[i - 1] == "_")):
            continue
        m = re.match(r"(and|or|unless)\b", expr[i:])
        if m:
            parts.append(expr[start:i])
            start = i + m.end()
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def strip_comparison(operand: str) -> str:
    """``X > 3`` -> ``X``: cut at the first top-level comparison (thresholds are on the right in our rules);
    also drops a leading vector-matching clause left over from splitting (``on (instance) X`` -> ``X``)."""
    operand = re.sub(r"^(on|ignoring)\s*\([^)]*\)\s*(group_(left|right)\s*(\([^)]*\))?)?", "", operand.strip())
    for i, c, depth in _scan(operand):
        if depth == 0 and c in "<>=!" and operand[i : i + 2] not in {"=~", "!~"}:
            return operand[:i].strip()
    return operand.strip()


def selectors(expr: str) -> list[str]:
    """Every vector selector (metric name with its label matchers) used in ``expr``."""
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    found: list[str] = []
    for m in re.finditer(r"(?<![\w.\"])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", text):
        name, matchers = m.group(1), m.group(2) or ""
        follows = text[m.end() :].lstrip()[:1]
        if name in KEYWORDS or (follows == "(" and not matchers):
            continue  # a function, an aggregation or a keyword
        sel = name + matchers
        if sel not in found:
            found.append(sel)
    return found


def existence_check(selector: str) -> str:
    """What must return data for a selector in a healthy run: equality matchers as written; a regex or negative
    matcher (``status=~"5.."`` matches nothing while all is well) only needs its label to exist."""
    m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?", selector.strip())
    assert m, selector
    name, body = m.group(1), m.group(2) or ""
    matchers = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body)
    parts = [f'{label}="{value}"' if op == "=" else f'{label}!=""' for label, op, value in matchers]
    return f"{name}{{{', '.join(parts)}}}" if parts else name


def alert_checks(rules: list[dict[str, Any]]) -> dict[str, str]:
    """query -> which alert it comes from: the watched quantities and the selectors of every rule."""
    checks: dict[str, str] = {}
    for rule in rules:
        expr = " ".join(rule["expr"].split())
        for operand in split_top_level(expr):
            checks.setdefault(strip_comparison(operand), f"{rule['alert']} (operand)")
        for sel in selectors(expr):
            checks.setdefault(existence_check(sel), f"{rule['alert']} (selector {sel})")
    return checks


def test_promql_helpers() -> None:
    expr = 'hotboard_write_savings_ratio < 2 and on (instance) sum by (instance) (rate(x_total{result="a"}[5m])) > 100'
    assert split_top_level(expr) == [
        "hotboard_write_savings_ratio < 2",
        'on (instance) sum by (instance) (rate(x_total{result="a"}[5m])) > 100',
    ]
    assert [strip_comparison(p) for p in split_top_level(expr)] == [
        "hotboard_write_savings_ratio",
        'sum by (instance) (rate(x_total{result="a"}[5m]))',
    ]
    assert selectors(expr) == ["hotboard_write_savings_ratio", 'x_total{result="a"}']
    assert strip_comparison('up{job="a"} == 0') == 'up{job="a"}'
    assert strip_comparison('sum(rate(r_total{status=~"5.."}[5m]) or vector(0)) / 3 > 0.01') == (
        'sum(rate(r_total{status=~"5.."}[5m]) or vector(0)) / 3'
    )
    assert selectors("histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))") == ["h_bucket"]
    assert selectors("deriv(sum(lag)[5m:]) > 0") == ["lag"]
    assert existence_check('r_total{status=~"5..", route="/x"}') == 'r_total{status!="", route="/x"}'
    assert existence_check('up{job="a"}') == 'up{job="a"}'
    assert existence_check("lag") == "lag"


# ------------------------------------------------------------------------------------------------ processes


def require_prometheus() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or tool is None:
        unavailable("prometheus and promtool (Debian package prometheus; scripts/install-system-deps.sh)")
    assert prom is not None and tool is not None
    return prom, tool


def promtool(*args: str) -> str:
    _, tool = require_prometheus()
    result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_promtool_accepts_the_shipped_config_and_rules() -> None:
    promtool("check", "config", str(PROMETHEUS_YML))
    out = promtool("check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(alert_rules())} rules found" in out


@contextlib.contextmanager
def prometheus(tmp: Path, jobs: dict[str, list[str]]) -> Iterator[str]:
    """A Prometheus on a free loopback port scraping ``jobs`` every second with the shipped alert rules (and the
    shipped job's metric relabelling)."""
    binary, _ = require_prometheus()
    shipped = {job["job_name"]: job for job in yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]}
    relabel = {job: shipped.get(job, {}).get("metric_relabel_configs") for job in jobs}
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": targets}],
                **({"metric_relabel_configs": relabel[job]} if relabel[job] else {}),
            }
            for job, targets in jobs.items()
        ],
    }
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    promtool("check", "config", str(path))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        binary,
        f"--config.file={path}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    prometheus = Child(
        "prometheus", command, log_path=tmp / "prometheus.log", ready=partial(url_answers, f"{url}/-/ready")
    )
    with prometheus.start(timeout_s=30):
        yield url


async def instant(client: httpx.AsyncClient, expr: str) -> list[dict[str, Any]]:
    resp = await client.get("/api/v1/query", params={"query": expr})
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr!r} is not valid PromQL: {body}"
    return list(body["data"]["result"])


async def all_return_data(prom_url: str, queries: dict[str, str], deadline_s: float = QUERY_DEADLINE_S) -> None:
    """Poll until every query returns a non-empty result; fail naming the ones that never did."""
    deadline = time.monotonic() + deadline_s
    missing = dict(queries)
    async with httpx.AsyncClient(base_url=prom_url, timeout=10) as client:
        while True:
            for expr in list(missing):
                if await instant(client, expr):
                    del missing[expr]
            if not missing:
                return
            if time.monotonic() > deadline:
                lines = "\n".join(f"  {origin}: {expr}" for expr, origin in missing.items())
                raise AssertionError(f"no data after {deadline_s:.0f}s for:\n{lines}")
            await asyncio.sleep(0.5)


async def rules_evaluate_cleanly(prom_url: str, groups: set[str]) -> None:
    """Every rule of ``groups`` has been evaluated at least once, without an error."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=prom_url, timeout=10) as client:
        while True:
            body = (await client.get("/api/v1/rules")).json()
            rules = [r for g in body["data"]["groups"] if g["name"] in groups for r in g["rules"]]
            bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] == "err"]
            assert not bad, f"alert rules fail to evaluate: {bad}"
            if rules and all(r["health"] == "ok" for r in rules):
                return
            assert time.monotonic() < deadline, f"rules not evaluated: {[(r['name'], r['health']) for r in rules]}"
            await asyncio.sleep(0.5)


# ------------------------------------------------------------------------------------------------ worker


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    """Sync fixture: ``topic_factory`` uses ``asyncio.run`` and cannot be called inside an async test."""
    return topic_factory(8)


@contextlib.asynccontextmanager
async def running_worker(kafka: str, redis_url: str, topic: str) -> AsyncIterator[tuple[Worker, int]]:
    port = free_port()
    settings = WorkerSettings(
        kafka=kafka,
        redis=redis_url,
        topic=topic,
        group=f"prom-{topic}",
        metrics_port=port,
        metrics_host="127.0.0.1",
        session_timeout_ms=6000,
    )
    async with Worker(settings, handle_signals=False) as worker:
        run = asyncio.create_task(worker.run())
        try:
            yield worker, port
        finally:
            worker.stop()
            await asyncio.wait_for(run, timeout=30)


async def load(kafka: str, topic: str, stop: asyncio.Event, phases: list[tuple[float, float]]) -> None:
    """Valid events at ``rate`` for ``seconds`` per phase (the last phase runs until ``stop``), plus a few
    malformed records first so the DLQ metrics have data."""
    await publish(kafka, topic, BAD_RECORDS)
    for n, (rate, seconds) in enumerate(phases):
        last = n == len(phases) - 1
        phase_stop = stop if last else asyncio.Event()
        timer = None if last else asyncio.get_running_loop().call_later(seconds, phase_stop.set)
        events = generate(10**8, players=2000, boards=3, seed=n)
        await publish(kafka, topic, events, rate=rate, fresh_ts=True, stop=phase_stop)
        if timer is not None:
            timer.cancel()
        if stop.is_set():
            return


async def test_every_worker_query_of_dashboard_and_alerts_returns_data(
    kafka: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    render = os.environ.get(RENDER_ENV) == "1"
    phase_s = float(os.environ.get("HOTBOARD_RENDER_PHASE_S", "30"))
    phases = [(1000.0, phase_s), (3000.0, phase_s), (8000.0, phase_s)] if render else [(3000.0, 0.0)]
    dashboard = {e: "dashboard" for e in grafana_exprs() if not is_api(e) and not is_archive(e)}
    alerts = {q: origin for q, origin in alert_checks(alert_rules()).items() if not is_api(q) and not is_archive(q)}
    assert dashboard and alerts

    async with running_worker(kafka, redis_url, topic) as (worker, port):
        with prometheus(tmp_path / "prom", {"hotboard-worker": [f"127.0.0.1:{port}"]}) as prom_url:
            stop = asyncio.Event()
            started = time.time()
            producer = asyncio.create_task(load(kafka, topic, stop, phases))
            try:
                await all_return_data(prom_url, {**dashboard, **alerts})
                await rules_evaluate_cleanly(prom_url, {"hotboard-worker"})
                if render:
                    await asyncio.wait_for(asyncio.shield(producer), timeout=phase_s * (len(phases) - 1) + 60)
            except TimeoutError:
                pass  # the last phase runs until stopped
            finally:
                stop.set()
                await producer
            assert worker.flushes > 0 and worker.failed_flushes == 0
            if render:
                renderer = load_renderer()
                rates = " -> ".join(f"{rate:.0f}" for rate, _ in phases)
                note = (
                    f"1 worker, 8 partitions, 1 s windows; load {rates} events/s (2000 Zipf players, 3 boards), "
                    "generated in the worker's own process"
                )
                await asyncio.to_thread(renderer.render, prom_url, DASHBOARD_PNG, started, time.time(), note=note)
                assert DASHBOARD_PNG.stat().st_size > 10_000


def load_renderer() -> Any:
    spec = importlib.util.spec_from_file_location("render_dashboard", ROOT / "scripts" / "render_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------ archiver


async def test_every_archive_query_of_dashboard_and_alerts_returns_data(
    kafka: str, topic: str, redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    """The archiver scraped with the shipped relabelling: its own series answer, and none of the worker's leak
    into the worker panels."""
    dashboard = {e: "dashboard" for e in grafana_exprs() if is_archive(e)}
    alerts = {q: origin for q, origin in alert_checks(alert_rules()).items() if is_archive(q)}
    assert dashboard and alerts
    port = free_port()
    settings = ArchiverSettings(
        kafka=kafka,
        redis=redis_url,
        postgres=postgres_url,
        topic=topic,
        group=f"prom-{topic}",
        metrics_port=port,
        metrics_host="127.0.0.1",
        session_timeout_ms=6000,
        window_ms=1000,
    )
    async with Archiver(settings, handle_signals=False) as archiver:
        run = asyncio.create_task(archiver.run())
        try:
            with prometheus(tmp_path / "prom", {"hotboard-archiver": [f"127.0.0.1:{port}"]}) as prom_url:
                stop = asyncio.Event()
                producer = asyncio.create_task(load(kafka, topic, stop, [(2000.0, 0.0)]))
                try:
                    await all_return_data(prom_url, {**dashboard, **alerts})
                    await rules_evaluate_cleanly(prom_url, {"hotboard-archive"})
                    async with httpx.AsyncClient(base_url=prom_url, timeout=10) as client:
                        assert not await instant(client, "hotboard_events_total"), "a worker series was kept"
                finally:
                    stop.set()
                    await producer
        finally:
            archiver.stop()
            await asyncio.wait_for(run, timeout=30)


# ------------------------------------------------------------------------------------------------ read API


async def api_traffic(api_url: str, stop: asyncio.Event) -> None:
    """Hits (repeated top pages), misses, a 404 and a 422, until stopped."""
    paths = [
        "/v1/boards/global/top?limit=10",
        "/v1/boards/global/top?limit=10",
        "/v1/boards/global/players/p-1",
        "/v1/boards/global/players/p-2/around?radius=2",
        "/v1/boards/global/players/nobody-here",
        "/v1/boards/global/top?limit=0",
    ]
    async with httpx.AsyncClient(base_url=api_url, timeout=5) as client:
        while not stop.is_set():
            for path in paths:
                await client.get(path)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.05)


async def test_every_api_query_of_dashboard_and_alerts_returns_data(redis_url: str, tmp_path: Path) -> None:
    if importlib.util.find_spec("reader_api") is None:
        unavailable("reader_api (the read API)")
    dashboard = {e: "dashboard" for e in grafana_exprs() if is_api(e)}
    alerts = {q: origin for q, origin in alert_checks(alert_rules()).items() if is_api(q)}
    assert dashboard and alerts
    client = Redis.from_url(redis_url)
    try:
        await client.zadd(board_key("global"), {f"p-{i}": i * 10 for i in range(100)})
    finally:
        await client.aclose()
    with api_server(redis_url, tmp_path) as api:
        scraped = f"{LOOPBACK}:{api.metrics_port}"  # the API's metrics port, as deploy/prometheus scrapes it
        with prometheus(tmp_path / "prom", {"hotboard-api": [scraped]}) as prom_url:
            stop = asyncio.Event()
            traffic = asyncio.create_task(api_traffic(api.url, stop))
            try:
                await all_return_data(prom_url, {**dashboard, **alerts})
                await rules_evaluate_cleanly(prom_url, {"hotboard-api"})
            finally:
                stop.set()
                await traffic
