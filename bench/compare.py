"""Worker throughput and write accounting of this checkout against an earlier commit, in one run.

``python -m bench.compare --baseline afc05d3``: checks the baseline out into a temporary git worktree, then
alternates ``python -m bench.worker --runs 1`` of the baseline and of this checkout (each on its own fresh
embedded broker and redis-server, same events by seed), so drifting load on a shared machine hits both alike.
Prints each run and the medians side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = re.compile(r"^worker run: ([\d,]+) events/s")
#: Figure name -> the row prefix of bench.worker's table whose ratio column it is.
ROWS = {"events / ZINCRBY": "3a.", "events / all writes": "3b.", "writes / minimum": "3c."}
FIGURES = ["worker events/s", *ROWS]


def worktree(ref: str) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], check=True, capture_output=True, text=True)
    path = Path(tempfile.gettempdir()) / f"hotboard-baseline-{sha.stdout.strip()[:12]}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref], check=True)
    return path


def one_run(src: Path, extra: list[str]) -> dict[str, float]:
    """One ``bench.worker`` run with ``src`` first on the import path (this venv's packages otherwise)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "bench.worker", "--runs", "1", "--skip-ceiling", "--skip-flush", *extra]
    out = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"bench.worker in {src} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    figures: dict[str, float] = {}
    for line in out.stdout.splitlines():
        if m := RATE.match(line):
            figures["worker events/s"] = float(m.group(1).replace(",", ""))
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name, prefix in ROWS.items():
            if len(cells) == 5 and cells[0].startswith(prefix):
                figures[name] = float(cells[3])
    if "exact (every worker run): yes" not in out.stdout:
        raise SystemExit(f"bench.worker in {src}: boards not exact\n{out.stdout[-2000:]}")
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git ref of the code to compare against")
    ap.add_argument("--runs", type=int, default=2, help="alternating runs per side")
    args, extra = ap.parse_known_args(argv)
    base = worktree(args.baseline)
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
    for i in range(args.runs):
        for side, src in (("baseline", base), ("current", ROOT)):
            figures = one_run(src, extra)
            runs[side].append(figures)
            print(f"run {i + 1} {side:8}: " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()), flush=True)
    print(f"\ncommand: python -m bench.compare --baseline {args.baseline} --runs {args.runs} {' '.join(extra)}")
    print(f"{'figure (median of runs)':28} | {'baseline ' + args.baseline:>18} | {'current':>12} | current/baseline")
    for name in FIGURES:
        b = statistics.median(r[name] for r in runs["baseline"] if name in r)
        c = statistics.median(r[name] for r in runs["current"] if name in r)
        print(f"{name:28} | {b:>18,.2f} | {c:>12,.2f} | {c / b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
