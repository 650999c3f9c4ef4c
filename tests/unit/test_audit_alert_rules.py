"""The audit alerts of deploy/prometheus/alerts.yml, evaluated by ``promtool test rules`` over the series the
archiver exports in each situation (archive/archiver.py, archive/audit_log.py): a fresh install is not stale
until an audit was due, one audit that could not verify a board (a window in flight) does not page, a player
that differs pages at once, and audits that stopped are stale. Annotations are left out of the rules under test
(promtool would compare their rendered text); expressions, ``for`` and labels are the shipped ones."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.services import unavailable

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
AUDIT_ALERTS = ("HotboardAuditFailed", "HotboardAuditUnverified", "HotboardAuditStale")

LAST_RUN = "hotboard_archive_audit_last_run_timestamp_seconds"
AWAITED = "hotboard_archive_audit_awaited_since_timestamp_seconds"
NOT_EXACT = "hotboard_archive_audit_boards_not_exact"
DIFFER = "hotboard_archive_audit_players_differ"
RUNS = "hotboard_archive_audit_runs_not_exact"

DAY_MIN = 24 * 60
#: The archiver starts a day into promtool's clock (which starts at 0), so that a gauge reading 0 is old.
START_S = DAY_MIN * 60


def series(**values: str) -> list[dict[str, str]]:
    """One input series per gauge of the archiver ``a``; values in promtool's notation, one sample a minute."""
    return [{"series": f'{name}{{instance="a"}}', "values": v} for name, v in values.items()]


def steady(value: int, minutes: int) -> str:
    """``value`` for ``minutes`` samples (promtool's ``axn`` is n + 1 samples)."""
    return f"{value}x{minutes - 1}"


def up_from_start(*parts: str) -> str:
    """Absent for the first day, then ``parts``."""
    return " ".join([f"_x{DAY_MIN}", *parts])


def alerts_at(minute: int, firing: dict[str, str]) -> list[dict[str, Any]]:
    """The expected state of every audit alert ``minute`` minutes after the archiver started: ``firing`` maps
    the firing ones to their severity."""
    return [
        {
            "eval_time": f"{DAY_MIN + minute}m",
            "alertname": name,
            "exp_alerts": ([{"exp_labels": {"severity": firing[name], "team": "hotboard"}}] if name in firing else []),
        }
        for name in AUDIT_ALERTS
    ]


def run_promtool(tmp_path: Path, input_series: list[dict[str, str]], checks: list[dict[str, Any]]) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        unavailable("promtool (Debian package prometheus; scripts/install-system-deps.sh)")
    assert tool is not None
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": checks}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([tool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_audit_alerts_are_the_ones_tested() -> None:
    names = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    assert {n for n in names if n.startswith("HotboardAudit")} == set(AUDIT_ALERTS)


def test_a_fresh_install_is_stale_only_once_an_audit_was_due(tmp_path: Path) -> None:
    """No audit yet: the last-run gauge reads 0, which is not 'an audit 56 years ago'. Stale waits for 3 h of
    the archiver's uptime (plus its ``for``), then fires."""
    hours = 4 * 60
    gauges = series(
        **{
            LAST_RUN: up_from_start(steady(0, hours)),
            AWAITED: up_from_start(steady(START_S, hours)),
            NOT_EXACT: up_from_start(steady(0, hours)),
            DIFFER: up_from_start(steady(0, hours)),
            RUNS: up_from_start(steady(0, hours)),
        }
    )
    run_promtool(
        tmp_path, gauges, [*alerts_at(30, {}), *alerts_at(170, {}), *alerts_at(200, {"HotboardAuditStale": "ticket"})]
    )


def audit_runs(outcomes: list[tuple[int, int, int]], after_min: int = 60) -> list[dict[str, str]]:
    """The gauges through hourly audits, the first ``after_min`` minutes after the archiver started:
    ``outcomes`` holds (boards not exact, players that differ, runs in a row not exact) per run."""
    last_run, awaited = [steady(0, after_min)], [steady(START_S, after_min)]
    not_exact, differ, runs = [steady(0, after_min)], [steady(0, after_min)], [steady(0, after_min)]
    for i, (n, d, r) in enumerate(outcomes):
        finished = START_S + (after_min + 60 * i) * 60
        last_run.append(steady(finished, 60))
        awaited.append(steady(finished, 60))
        not_exact.append(steady(n, 60))
        differ.append(steady(d, 60))
        runs.append(steady(r, 60))
    return series(
        **{
            LAST_RUN: up_from_start(*last_run),
            AWAITED: up_from_start(*awaited),
            NOT_EXACT: up_from_start(*not_exact),
            DIFFER: up_from_start(*differ),
            RUNS: up_from_start(*runs),
        }
    )


def test_one_unverified_run_is_a_ticket_and_clears_with_the_next_audit(tmp_path: Path) -> None:
    """An audit that could not verify a board (its events in between on partitions moving opposite ways, a board
    whose first window the archive had not written yet) is not a difference: no page, a ticket that the next
    exact audit clears."""
    gauges = audit_runs([(1, 0, 1), (0, 0, 0)])
    run_promtool(tmp_path, gauges, [*alerts_at(90, {"HotboardAuditUnverified": "ticket"}), *alerts_at(150, {})])


def test_a_player_that_differs_pages_at_once(tmp_path: Path) -> None:
    gauges = audit_runs([(0, 0, 0), (1, 1, 1)])
    run_promtool(tmp_path, gauges, [*alerts_at(90, {}), *alerts_at(121, {"HotboardAuditFailed": "page"})])


def test_boards_not_exact_on_two_audits_in_a_row_page(tmp_path: Path) -> None:
    """Unverified twice running is no window in flight: the proof has been missing for an hour."""
    gauges = audit_runs([(1, 0, 1), (2, 0, 2)])
    run_promtool(
        tmp_path,
        gauges,
        [*alerts_at(90, {"HotboardAuditUnverified": "ticket"}), *alerts_at(150, {"HotboardAuditFailed": "page"})],
    )


@pytest.mark.parametrize("restarted", [False, True])
def test_audits_that_stopped_are_stale(tmp_path: Path, restarted: bool) -> None:
    """One exact audit an hour after the start, then none: stale 3 h (and the rule's ``for``) later, whether or
    not the archiver restarted since (the last run is read from the archive, not kept by the process)."""
    minutes, finished = 5 * 60, START_S + 60 * 60

    def gauge(before: int, after: int) -> str:
        if restarted:  # down for ten minutes two hours after the audit: its series are absent meanwhile
            return up_from_start(steady(before, 60), steady(after, 120), "_x10", steady(after, minutes - 190))
        return up_from_start(steady(before, 60), steady(after, minutes - 60))

    gauges = series(
        **{LAST_RUN: gauge(0, finished), AWAITED: gauge(START_S, finished), NOT_EXACT: gauge(0, 0)},
        **{DIFFER: gauge(0, 0), RUNS: gauge(0, 0)},
    )
    run_promtool(tmp_path, gauges, [*alerts_at(200, {}), *alerts_at(60 + 180 + 15, {"HotboardAuditStale": "ticket"})])
