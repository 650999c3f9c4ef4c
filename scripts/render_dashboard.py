"""Render the key panels of the Grafana dashboard as a PNG, from a real Prometheus (the picture of
docs/operations.md, "Dashboard").

The queries are the dashboard's own (deploy/grafana/dashboards/hotboard.json), so the picture shows exactly
what Grafana would. tests/integration/test_prometheus.py calls ``render`` at the end of its run when
HOTBOARD_RENDER_DASHBOARD=1; by hand:

    python scripts/render_dashboard.py --prom http://127.0.0.1:9090 --minutes 10 --out docs/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "hotboard.json"

#: Panel titles (as in the dashboard) plotted, in order, on a 2x2 grid.
KEY_PANELS = (
    "Events in vs Redis writes out",
    "Write savings ratio",
    "Event freshness p50 / p99",
    "Flush latency p50 / p99",
)
UNITS = {"ops": "per second", "x": "events per write", "s": "seconds"}


def dashboard_panels(path: Path = DASHBOARD) -> dict[str, dict[str, Any]]:
    panels: dict[str, dict[str, Any]] = {}
    for panel in json.loads(path.read_text())["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            if p.get("targets"):
                panels[p["title"]] = p
    return panels


def substitute(expr: str, rate_interval: str) -> str:
    """Grafana's built-in variables -> concrete durations."""
    return expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)


def query_range(prom_url: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom_url}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"query failed: {expr}: {body}")
    return list(body["data"]["result"])


def legend(fmt: str, labels: dict[str, str]) -> str:
    out = fmt
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def render(
    prom_url: str, out_path: Path, start: float, end: float, *, rate_interval: str = "10s", note: str = ""
) -> Path:
    """Plot the key panels over [start, end] (unix seconds) into ``out_path`` (PNG); returns the path.
    ``note`` describes the run in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = dashboard_panels()
    step = max(1.0, (end - start) / 400)
    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), dpi=110, sharex=True)
    for ax, title in zip(axes.flat, KEY_PANELS, strict=True):
        panel = panels[title]
        for target in panel["targets"]:
            for series in query_range(prom_url, substitute(target["expr"], rate_interval), start, end, step):
                points = [(float(t) - start, float(v)) for t, v in series["values"] if math.isfinite(float(v))]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, label=legend(target.get("legendFormat", ""), series["metric"]), linewidth=1.6)
        ax.set_title(title, fontsize=11, loc="left")
        ax.set_ylabel(UNITS.get(panel["fieldConfig"]["defaults"].get("unit", ""), ""))
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left")
    for ax in axes[1]:
        ax.set_xlabel("seconds into the run")
    fig.suptitle(
        f"hotboard{' - ' + note if note else ''}\nqueries of deploy/grafana/dashboards/hotboard.json, "
        f"$__rate_interval={rate_interval}, from a real Prometheus",
        fontsize=10,
    )
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path)
    plt.close(fig)
    return out_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prom", default="http://127.0.0.1:9090", help="Prometheus base URL")
    parser.add_argument("--minutes", type=float, default=10.0, help="how far back from now")
    parser.add_argument("--rate-interval", default="30s", help="what $__rate_interval stands for")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    args = parser.parse_args()
    end = time.time()
    path = render(args.prom, args.out, end - args.minutes * 60, end, rate_interval=args.rate_interval)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
