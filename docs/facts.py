"""Write a run's own facts into the docs: its points and tasks, the range of N it simulated and
the range of its limit path, its wall time, the CPU and the date, read from the run folder's
files (``tasks.json``, ``run.json``, ``archive.tar.gz``'s ``environment.json``).

    python docs/facts.py outputs/sub_halfin_whitt/<date_time>            # print the facts
    python docs/facts.py outputs/sub_halfin_whitt/<date_time> --write    # and rewrite the blocks
    python docs/facts.py RUN_DIR --write --note "other work shared the machine"   # say how it ran

Every block ``<!-- facts:SWEEP:begin -->...<!-- facts:SWEEP:end -->`` of README.md,
docs/running.md and docs/sweeps.md whose sweep is the run's is rewritten with the facts line;
nothing else is touched. ``tests/test_docs.py`` checks the blocks' counts against the plan.
"""
from __future__ import annotations

import json
import math
import re
import sys
import tarfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", ROOT / "docs" / "running.md", ROOT / "docs" / "sweeps.md")
BLOCK = re.compile(r"(<!-- facts:(?P<sweep>[A-Za-z0-9_]+):begin -->)(?P<body>.*?)(<!-- facts:(?P=sweep):end -->)", re.S)
#: the facts line's counts, as tests/test_docs.py reads them back
COUNTS = re.compile(r"(?P<points>[\d,]+) points, (?P<tasks>[\d,]+) tasks")


def _decade(x: float) -> str:
    e = math.log10(x)
    return f"10^{e:g}" if abs(e - round(e)) < 1e-9 else f"{x:g}"


def _environment(run: Path) -> dict:
    archive = run / "archive.tar.gz"
    if not archive.is_file():
        return {}
    with tarfile.open(archive) as tar:
        member = tar.extractfile("run/environment.json")
        return json.loads(member.read()) if member else {}


def facts(run: Path) -> dict:
    tasks = json.loads((run / "tasks.json").read_text())["tasks"]
    state = json.loads((run / "run.json").read_text())
    sims = [t for t in tasks if "seed" in t and t.get("events") is not None]
    limit_n = [t["n_servers"] for t in tasks if t not in sims and "n_servers" in t]
    limit_n += [10.0 ** t["log10_n"] for t in tasks if "log10_n" in t]
    started = datetime.strptime(state["started"], "%Y-%m-%dT%H:%M:%S%z")
    ended = datetime.strptime(state["updated"], "%Y-%m-%dT%H:%M:%S%z")
    secs = round((ended - started).total_seconds())
    cpu = (_environment(run).get("cpu") or {}).get("model") or "CPU not recorded"
    return {
        "sweep": state["sweep"], "status": state["status"],
        "points": len({t["_meta"]["point_id"] for t in tasks}), "tasks": len(tasks),
        "simulations": len(sims), "limit_tasks": len(tasks) - len(sims),
        "n_simulated": (min(t["n_servers"] for t in sims), max(t["n_servers"] for t in sims)) if sims else None,
        "n_limit": (min(limit_n), max(limit_n)) if limit_n else None,
        "seconds": secs, "date": started.strftime("%Y-%m-%d"), "cpu": cpu,
    }


def line(f: dict, note: str = "") -> str:
    parts = [f"{f['points']:,} points, {f['tasks']:,} tasks ({f['simulations']:,} simulations, "
             f"{f['limit_tasks']:,} limit points)"]
    if f["n_simulated"]:
        parts.append(f"simulated N = {_decade(f['n_simulated'][0])}..{_decade(f['n_simulated'][1])}")
    if f["n_limit"]:
        parts.append(f"limit to N = {_decade(f['n_limit'][1])}")
    m, s = divmod(f["seconds"], 60)
    parts.append(f"{m} min {s} s for the sweep ({f['status']}; {f['cpu']}, 2 cores, {f['date']}{'; ' + note if note else ''})")
    return "; ".join(parts)


def write(f: dict, note: str = "") -> list[Path]:
    changed = []
    text_line = line(f, note)
    for path in DOCS:
        text = path.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + text_line + m.group(4) if m.group("sweep") == f["sweep"] else m.group(0), text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    f = facts(Path(argv[0]))
    note = argv[argv.index("--note") + 1] if "--note" in argv[1:-1] else ""
    print(line(f, note))
    if "--write" in argv[1:]:
        for p in write(f, note):
            print(f"rewrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
