"""The documentation stays true: links resolve, the README opens with its two commands, the CLI
reference is what the commands say now, and figures live only in RESULTS.md.

(a) Every relative link of README.md, docs/*.md and examples/benchmarks/RESULTS.md (and
    JOURNAL.md, if the journal moves there) names an existing file, and every ``#anchor`` an
    existing heading of its target (GitHub's slugs).
(b) README.md is at most 250 lines and opens with exactly two commands: the demo, and the test
    command `.ci/run` runs.
(c) docs/cli.md equals what ``graphprep.pipeline.core.clidoc`` renders from the click commands.
(d) README.md and docs/ quote no measurement: no time, size, rate, ratio or percentage, no
    decimal of two or more places, no date (see ``figures``); the few design constants they
    name are in ``CONSTANTS``, each with what it is. RESULTS.md (and JOURNAL.md) are exempt,
    and so are the generated pages (cli.md, tables-config.md: their text is the code's).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "examples" / "benchmarks" / "RESULTS.md"
JOURNAL = ROOT / "examples" / "benchmarks" / "JOURNAL.md"
CI = ROOT / ".ci" / "run"
GENERATED = {"cli.md", "tables-config.md"}

# docs/cli.md's commands: what `python -m graphprep.pipeline.core.clidoc` takes.
CLI_SPECS = [
    "graphprep.pipeline.cli:prep",
    "graphprep.trainer.cli:main=python -m graphprep.trainer",
    "graphprep.trainer.tasks.embed:main=python -m graphprep.trainer embed",
]
REGENERATE = ("python -m graphprep.pipeline.core.clidoc "
              + " ".join(s if " " not in s else f'"{s}"' for s in CLI_SPECS) + " > docs/cli.md")


def linked_pages() -> list[Path]:
    pages = [README, *sorted(DOCS.glob("*.md")), RESULTS]
    return pages + ([JOURNAL] if JOURNAL.exists() else [])


def figure_pages() -> list[Path]:
    return [README] + [p for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED]


# ---------------------------------------------------------------------------------------------
# Markdown, the way GitHub reads it

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)


def without_code(markdown: str) -> str:
    """``markdown`` without fenced code blocks and inline code spans."""
    text = FENCE.sub("", markdown)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", " ", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor of ``markdown``: its headings (repeats get -1, -2, ...) and ``<a id=...>``."""
    found, seen = set(), {}
    for line in FENCE.sub("", markdown).splitlines():
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    found |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", markdown))
    return found


def links(markdown: str) -> list[str]:
    """The targets of ``markdown``'s inline links and images, outside code."""
    return re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", without_code(markdown))


def test_slugs_are_githubs():
    assert slug("1. Chunked graph format") == "1-chunked-graph-format"
    assert slug("`prep chunk` of DGL's format (issue 16; 2026-11-24)") == \
        "prep-chunk-of-dgls-format-issue-16-2026-11-24"
    assert slug("Reading PyG files (`prep chunk … --from pyg`)") == \
        "reading-pyg-files-prep-chunk----from-pyg"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n### B c\n") == {"a", "a-1", "b-c"}


# ---------------------------------------------------------------------------------------------
# (a) links

@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = page.read_text()
    own = anchors(text)
    bad = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):      # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
            bad.append(f"{target}: no file {shown}")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix != ".md":
                bad.append(f"{target}: an anchor into something that is not Markdown")
            elif anchor not in (own if dest == page else anchors(dest.read_text())):
                bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(bad)


def test_every_doc_page_is_reachable_from_the_readme():
    readme_links = {(README.parent / t.partition("#")[0]).resolve()
                    for t in links(README.read_text()) if not t.startswith(("http", "#"))}
    missing = [p.name for p in DOCS.glob("*.md") if p.resolve() not in readme_links]
    assert not missing, f"docs pages the README does not link: {missing}"


# ---------------------------------------------------------------------------------------------
# (b) the README's opening

def ci_test_command() -> str:
    lines = [ln.strip() for ln in CI.read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    (command,) = [ln for ln in lines if "pytest" in ln]
    return command


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= 250, f"README.md has {n} lines: at most 250 (move the rest into docs/)"


def test_readme_opens_with_the_demo_and_the_test_command():
    text = README.read_text()
    m = re.match(r"# [^\n]+\n\n```(?:bash|sh)?\n(.*?)\n```\n", text, re.S)
    assert m, "README.md must open with its title, then the two commands as one code block"
    demo, tests = m.group(1).splitlines()
    assert tests == ci_test_command(), (tests, ci_test_command())
    assert demo.startswith("python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt ")
    assert demo.endswith("&& bash examples/demo.sh")
    assert (ROOT / "examples" / "demo.sh").exists()


# ---------------------------------------------------------------------------------------------
# (c) docs/cli.md is generated

def test_cli_reference_is_current():
    got = subprocess.run([sys.executable, "-m", "graphprep.pipeline.core.clidoc", *CLI_SPECS],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    assert REGENERATE in got.stdout, "the page's header must say how to regenerate it"
    current = (DOCS / "cli.md").read_text()
    assert current == got.stdout, f"docs/cli.md is stale: regenerate it with\n  {REGENERATE}"


def test_cli_reference_names_every_command_and_option():
    """The page covers what the CLI has: every prep sub-command and every visible option."""
    text = (DOCS / "cli.md").read_text()
    got = subprocess.run([sys.executable, "-c", (
        "from graphprep.pipeline.cli import prep\nimport click\n"
        "ctx = click.Context(prep, info_name='prep')\n"
        "for name in prep.list_commands(ctx):\n"
        "    cmd = prep.get_command(ctx, name)\n"
        "    opts = [o for p in cmd.params if isinstance(p, click.Option) and not p.hidden\n"
        "            for o in getattr(p, 'opts', [])]\n"
        "    print(name, *opts)\n")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    for line in got.stdout.splitlines():
        name, *opts = line.split()
        assert f"### `prep {name}`" in text, name
        section = text.split(f"### `prep {name}`", 1)[1].split("\n### ", 1)[0]
        missing = [o for o in opts if f"`{o}" not in section]
        assert not missing, (name, missing)


def _load_clidoc():
    import importlib
    return importlib.import_module("graphprep.pipeline.core.clidoc")


def test_clidoc_renders_any_click_group():
    clidoc = _load_clidoc()

    @click.group()
    def tool():
        """A tool."""

    @tool.command()
    @click.argument("src")
    @click.option("--size", type=click.IntRange(1), default=3, help="How many.")
    @click.option("--mode", type=click.Choice(["a", "b"]), default="a", help="Which one.")
    @click.option("--fast/--slow", default=True, help="Speed.")
    @click.option("--secret", hidden=True)
    def run(src, size, mode, fast, secret):
        """Run it on SRC."""

    @tool.group()
    def sub():
        """Nested."""

    @sub.command()
    @click.option("--x", required=True, help="An x.")
    def leaf(x):
        """A leaf."""

    page = clidoc.render(tool, "tool")
    assert "## `tool`" in page and "### `tool run`" in page and "#### `tool sub leaf`" in page
    assert "tool run [OPTIONS] SRC" in page and "Run it on SRC." in page
    assert "| `--size` | integer range x>=1 | `3` | How many. |" in page
    assert "| `--mode` | a\\|b | `a` | Which one. |" in page
    assert "| `--fast/--slow` | flag | `--fast` | Speed. |" in page
    assert "| `--x` | text | required | An x. |" in page
    assert "--secret" not in page and "--help" not in page


def test_clidoc_imports_its_commands_only_by_name():
    """pipeline.core may import neither the CLI nor the trainer: the commands come as
    ``module:attr`` arguments."""
    source = (ROOT / "pipeline" / "core" / "clidoc.py").read_text()
    assert not re.search(r"^\s*(from|import)\s+(graphprep|pipeline|trainer)\b", source, re.M)
    with pytest.raises(SystemExit, match="module:attr"):
        _load_clidoc().load("no-colon")


# ---------------------------------------------------------------------------------------------
# (d) no figures outside RESULTS.md

# Design constants the docs name (defaults and fixed thresholds of the code, not measurements).
CONSTANTS = {
    "120 s": "--lost-worker-timeout's default",
    "5 s": "the launcher kills ranks 5 s after forwarding SIGTERM/SIGINT",
    "256 MB": "--recycle-mb auto's threshold on the embedded cluster",
    "8 MB": "the mmap threshold multilevel fixes in its workers",
    "32 MB": "glibc's adaptive mmap threshold's ceiling",
    "60%": "the share of a worker's memory --method auto lets METIS use",
    "10%": "how far over a cap KaMinPar's parts may be before the blocks",
    "49%": "the share of edges a coarse level may keep before sparsification",
    "5%": "the shrink below which coarsening stops",
}

NUM = r"(?:~|≈|<=|>=|<|>)?\d[\d,]*(?:\.\d+)?(?:\s?(?:-|–|to)\s?\d[\d,]*(?:\.\d+)?)?"
UNIT = (r"(?:M edges/s|edges/s|seeds/s|batches/s|rows/s|M/s|/s|ms|µs|us|min|minutes|seconds|sec"
        r"|hours|h|s|[KMGT]iB|[kKMGT]B|x|×|%)")
WITH_UNIT = re.compile(rf"(?<![\w.^/*]){NUM}\s?{UNIT}(?![\w/])")
DECIMAL = re.compile(r"(?<![\w.^/*])\d+\.\d{2,}(?![\w]|\.\d)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def prose(markdown: str) -> str:
    """What a reader takes figures from: the text with code blocks reduced to their ``#``
    comments, inline code and link targets removed."""
    def comments(block):
        lines = block.group(0).splitlines()[1:-1]
        return "\n".join(m.group(1) for line in lines
                         if (m := re.search(r"(?:^|\s)#(?!SBATCH)(.*)", line)))
    text = FENCE.sub(comments, markdown)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", " ", text, flags=re.S)
    return re.sub(r"\s+", " ", text)


def figures(markdown: str) -> list[str]:
    """Every measurement-like figure of ``markdown``'s prose: a number with a unit of time,
    size, rate, ratio or share; a decimal of two or more places (an AUC, a cut ratio); a date."""
    text = prose(markdown)
    found, spans = [], []
    for m in WITH_UNIT.finditer(text):
        found.append(m.group(0))
        spans.append(m.span())
    for pattern in (DECIMAL, DATE):
        for m in pattern.finditer(text):
            if not any(a <= m.start() < b for a, b in spans):
                found.append(m.group(0))
    return found


def test_figure_rule_catches_measurements():
    planted = ("It took 12.5 s and 3.4 GB (AUC 0.931), 1.07x faster, 4.2 M edges/s, on "
               "2026-11-27.\n\n```bash\nprep x --wait 7   # 10^8 edges, ~3 min\n```\n"
               "`--limit 9 s` [a](RESULTS.md#run-2026-11-27) 10^9 edges, 2x10^6 nodes, §3, "
               "a 4-round network, 2 parts, version 3.7.3\n")
    assert figures(planted) == ["12.5 s", "3.4 GB", "1.07x", "4.2 M edges/s", "~3 min",
                                "0.931", "2026-11-27"], figures(planted)


@pytest.mark.parametrize("page", figure_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_figures_outside_results(page):
    found = [f for f in figures(page.read_text()) if f not in CONSTANTS]
    assert not found, (f"{page.relative_to(ROOT)} quotes figures {found}: link the section of "
                       "examples/benchmarks/RESULTS.md that has them instead (or, for a design "
                       "constant of the code, add it to CONSTANTS with what it is)")


def test_constants_are_used():
    """A stale entry could later excuse a measurement that happens to match it."""
    used = {f for p in figure_pages() for f in figures(p.read_text())}
    assert not set(CONSTANTS) - used, set(CONSTANTS) - used


# ---------------------------------------------------------------------------------------------
# RESULTS.md: the headline table, and a command, commit and date for every journal entry

def _results_sections():
    text = RESULTS.read_text() + ("\n" + JOURNAL.read_text() if JOURNAL.exists() else "")
    heads = list(re.finditer(r"^#{2,3} .*$", text, re.M))
    for h, nxt in zip(heads, heads[1:] + [None]):
        yield h.group(0), text[h.start():nxt.start() if nxt else len(text)]


def test_results_open_with_the_headline_table():
    text = RESULTS.read_text()
    head = text.split("\n## ", 2)
    assert head[1].startswith("Headline figures"), "RESULTS.md must open with its headline table"
    rows = [ln for ln in head[1].splitlines() if ln.startswith("| ") and not ln.startswith("|---")]
    header, rows = rows[0], rows[1:]
    assert "baseline" in header and "command" in header and "commit" in header and "date" in header
    assert len(rows) >= 15, len(rows)
    for row in rows:
        assert re.search(r"\| [0-9a-f]{7,40}(, [0-9a-f]{7,40})* \| 20\d\d-\d\d-\d\d \|$", row), row
        assert re.search(r"\]\(#[^)]+\)", row), f"a row links its journal entry: {row}"


@pytest.mark.parametrize("heading,body", [s for s in _results_sections()
                                          if not s[0].startswith(("## Headline figures",
                                                                  "## The journal"))],
                         ids=lambda v: v[:40])
def test_every_journal_entry_names_command_commit_and_date(heading, body):
    assert re.search(r"\bcommits? [0-9a-f]{7,40}\b", body, re.I), f"{heading}: no commit"
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", body), f"{heading}: no date"
    assert re.search(r"bench_\w+\.py|`prep |not recorded|tests/|\.sh", body), \
        f"{heading}: no command"
