"""The README and docs/ hold together (issue 37 item 7): the README's test command is the one
``.ci/run`` runs, the README stays within 200 lines, its sweep table and docs index are complete,
and every relative link in README.md and docs/*.md reaches an existing file (and heading)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAIN_COMMAND = "pip install -e . && python -m pipeline +sweep=sub_halfin_whitt"


def _code_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif fence:
            out.append(line)
    return out


def _table_names(text: str, heading: str) -> set[str]:
    """The backticked first cells of the table that follows ``heading``."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))


def test_readme_commands_are_those_ci_runs():
    code = _code_lines(README.read_text())
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("pip install")]
    assert len(ci) == 1, ".ci/run should run exactly one test command"
    assert ci[0] in code, "the README's test command differs from the one .ci/run runs"
    assert MAIN_COMMAND in code


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines (at most 200: move long parts to docs/)"


def test_readme_lists_every_sweep():
    text = README.read_text()
    shipped = {p.stem for p in (REPO / "conf" / "sweep").glob("*.yaml")}
    assert _table_names(text, "## Shipped sweeps") == shipped
    assert _table_names((REPO / "docs" / "sweeps.md").read_text(), "## Shipped sweeps") == shipped


def test_readme_indexes_every_doc():
    text = README.read_text().split("## Docs", 1)[1]
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)\)", text))
    files = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*") if p.is_file()}
    assert files <= linked, f"not in the README's docs index: {sorted(files - linked)}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out, seen, fence = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


MARKDOWN = [README, *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, frag = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or (frag and dest.suffix == ".md" and frag not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"broken relative links in {path.name}: {broken}"


def test_the_headlines_counts_in_the_docs_are_the_plans():
    """The facts blocks (written by docs/facts.py from a run's own files) name the points and
    tasks the plan of the shipped sweep makes today: a change of the sweep that moves them must
    rewrite the blocks from a new run."""
    import importlib.util

    from pipeline.plan import make_plan
    from pipeline.run import to_plain
    from tests.helpers import compose

    spec = importlib.util.spec_from_file_location("docs_facts", REPO / "docs" / "facts.py")
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    blocks = [(p, m) for p in facts.DOCS for m in facts.BLOCK.finditer(p.read_text())]
    headline = [(p, m) for p, m in blocks if m.group("sweep") == "sub_halfin_whitt"]
    assert len(headline) >= 3, "README, running.md and sweeps.md each carry the headline's facts block"
    plan = make_plan(to_plain(compose(["+sweep=sub_halfin_whitt", "output_dir=/tmp/unused"])))
    for path, m in headline:
        counts = facts.COUNTS.search(m.group("body"))
        assert counts, f"{path.name}: the facts block names no counts: {m.group('body')!r}"
        got = (int(counts["points"].replace(",", "")), int(counts["tasks"].replace(",", "")))
        assert got == (len(plan.points), len(plan.tasks)), (
            f"{path.name} says {got[0]} points, {got[1]} tasks; the plan makes {len(plan.points)}, {len(plan.tasks)}"
            " (python docs/facts.py RUN_DIR --write)")
