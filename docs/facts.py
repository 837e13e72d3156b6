"""Write runs' own facts into the docs: their points and tasks, the range of N simulated and
the range of the limit path, the wall time, the CPU and the date, read from each run folder's
files (``tasks.json``, ``run.json``, ``archive.tar.gz``'s ``environment.json``).

    python docs/facts.py outputs/sub_halfin_whitt/<date_time>            # print the facts
    python docs/facts.py outputs/sub_halfin_whitt/<date_time> --write    # and rewrite the blocks
    python docs/facts.py RUN_DIR [RUN_DIR ...] --write --note "other work shared the machine" \
        --short-note "shared machine"        # the README's short blocks take the short note

Every block ``<!-- facts:SWEEP:begin -->...<!-- facts:SWEEP:end -->`` of README.md,
docs/running.md and docs/sweeps.md whose sweep is a given run's is rewritten with the facts
line, and every ``<!-- facts-short:SWEEP:begin -->...`` block with the short form (time, counts,
CPU, date) that the README's table has room for; nothing else is touched.
``tests/test_docs.py`` checks every block's counts against the plan of its sweep.
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
sys.path.insert(0, str(ROOT))
from sim.registry import STOCHASTIC_ENGINES  # noqa: E402  (the project's own list of simulators)

DOCS = (ROOT / "README.md", ROOT / "docs" / "running.md", ROOT / "docs" / "sweeps.md")
BLOCK = re.compile(r"(<!-- (?P<kind>facts|facts-short):(?P<sweep>[A-Za-z0-9_]+):begin -->)(?P<body>.*?)"
                   r"(<!-- (?P=kind):(?P=sweep):end -->)", re.S)
#: the facts line's counts, as tests/test_docs.py reads them back
COUNTS = re.compile(r"(?P<points>[\d,]+) points, (?P<tasks>[\d,]+) tasks")


def _decade(x: float) -> str:
    e = math.log10(x)
    return f"10^{e:g}" if abs(e - round(e)) < 1e-9 and e >= 2 else f"{x:g}"


def _range(lo: float, hi: float) -> str:
    return _decade(lo) if lo == hi else f"{_decade(lo)}..{_decade(hi)}"


def _duration(secs: int) -> str:
    m, s = divmod(secs, 60)
    return f"{m} min {s} s" if m else f"{s} s"


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
    sims = [t for t in tasks if t["engine"] in STOCHASTIC_ENGINES]
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
        parts.append(f"simulated N = {_range(*f['n_simulated'])}")
    if f["n_limit"] and f["n_simulated"] and f["n_limit"][1] > f["n_simulated"][1]:
        parts.append(f"limit to N = {_decade(f['n_limit'][1])}")
    parts.append(f"{_duration(f['seconds'])} for the sweep ({f['status']}; {f['cpu']}, 2 cores, {f['date']}"
                 f"{'; ' + note if note else ''})")
    return "; ".join(parts)


def short_line(f: dict, note: str = "") -> str:
    """The README table's form: time, then counts, CPU and date."""
    status = "" if f["status"] == "finished" else f"{f['status']}; "
    return (f"{_duration(f['seconds'])} ({status}{f['points']:,} points, {f['tasks']:,} tasks; {f['cpu']}, "
            f"{f['date']}{'; ' + note if note else ''})")


def write(f: dict, note: str = "", short_note: str | None = None) -> list[Path]:
    changed = []
    lines = {"facts": line(f, note), "facts-short": short_line(f, note if short_note is None else short_note)}
    for path in DOCS:
        text = path.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + lines[m.group("kind")] + m.group(5)
                        if m.group("sweep") == f["sweep"] else m.group(0), text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    def option(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv[:-1] else None

    note, short_note = option("--note") or "", option("--short-note")
    runs = [a for i, a in enumerate(argv)
            if not a.startswith("--") and (i == 0 or argv[i - 1] not in ("--note", "--short-note"))]
    for run in runs:
        f = facts(Path(run))
        print(f"{f['sweep']}: {line(f, note)}")
        if "--write" in argv:
            for p in write(f, note, short_note):
                print(f"  rewrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
