"""README figures come from RESULTS.md (the rule at the top of examples/benchmarks/RESULTS.md).

Every figure the README gives with a unit (s, ms, min, MB, GB, GiB, M edges/s, x, %, ...) and
every bare decimal (an AUC, a cut ratio), in prose, tables and the comments of code blocks, must
appear verbatim in RESULTS.md; each RESULTS section names a commit and a date. Pure text, no
imports of the project.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "examples" / "benchmarks" / "RESULTS.md"

# README figures that are not measurements. Keep this short; each says what it is.
NOT_MEASURED = {
    "64 MB",                    # --cache-mb default
    "5 s",                      # the launcher kills ranks 5 s after forwarding SIGTERM/SIGINT
    "120 s",                    # --lost-worker-timeout default
    "60%",                      # --method auto's share of the worker limit (partition/auto.py)
    "4 KiB", "16 MiB",          # sampled-hash block size; compressed-CSV read block
    "16 B/edge", "8 B/node", "16 B per input edge", "8 B per input edge",   # layout facts
    "8 B per halo node",        # layout fact
    "~1.3 M edges",             # arithmetic: a 2^17-node sub-range at average degree 10
    "270 B per input edge",     # the model constant; test_model_constant_matches_the_code
    "2025.2", "2.13",           # versions: pymetis, torch
}

NUM = r"(?:~|<=|>=)?\d[\d,]*(?:\.\d+)?(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?"
UNIT = (r"(?:M edges/s|M edges|edges/s|seeds/s|batches/s|M/s|ms|min|s|h|[KMGT]iB|[kKMGT]B|x|%"
        r"|B/edge|B/node|B per (?:input |halo )?(?:edge|node)|bytes per (?:edge|node))")
WITH_UNIT = re.compile(rf"(?<![\w.^/*]){NUM}\s?{UNIT}(?![\w/])")
DECIMAL = re.compile(r"(?<![\w.^/*])\d+\.\d+(?![\w.]|\.\d)")


def prose(markdown: str) -> str:
    """The text a reader takes figures from: code blocks reduced to their ``#`` comments,
    inline code removed."""
    def comments(block):
        lines = block.group(0).splitlines()[1:-1]
        return "\n".join(m.group(1) for line in lines
                         if (m := re.search(r"(?:^|\s)#(?!SBATCH)(.*)", line)))
    text = re.sub(r"^```.*?^```", comments, markdown, flags=re.S | re.M)
    return re.sub(r"`[^`]*`", " ", text)


def figures(markdown: str) -> list[str]:
    """Every figure of ``markdown``'s prose: with a unit, or a bare decimal."""
    text = re.sub(r"\s+", " ", prose(markdown))
    found, spans = [], []
    for m in WITH_UNIT.finditer(text):
        found.append(m.group(0))
        spans.append(m.span())
    for m in DECIMAL.finditer(text):
        if not any(a <= m.start() < b for a, b in spans):
            found.append(m.group(0))
    return found


def quoted_in(figure: str, text: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\w])", text) is not None


def _results_text() -> str:
    return re.sub(r"\s+", " ", RESULTS.read_text())


def test_every_readme_figure_is_in_results():
    results = _results_text()
    missing = [f for f in figures(README.read_text())
               if f not in NOT_MEASURED and not quoted_in(f, results)]
    assert not missing, (f"README figures with no entry in RESULTS.md: {missing}. Quote the "
                         "RESULTS entry exactly, or drop the figure (RESULTS.md's rule)")


def test_allow_list_is_used():
    """A stale allow-list entry could later excuse a measurement that happens to match it."""
    found = set(figures(README.read_text()))
    assert not NOT_MEASURED - found, NOT_MEASURED - found


def test_model_constant_matches_the_code():
    code = (ROOT / "pipeline" / "estimate.py").read_text()
    assert re.search(r"^METIS_BYTES_PER_EDGE = 270\b", code, re.M)


def test_extraction_catches_a_planted_figure():
    planted = ("It took 12.5 s and 3.4 GB (AUC 0.931), 1.07x faster, 4.2 M edges/s.\n\n"
               "```bash\nprep x --wait 7 s   # 10^8 edges, ~3 min\n```\n`--limit 9 s`\n")
    got = figures(planted)
    assert got == ["12.5 s", "3.4 GB", "1.07x", "4.2 M edges/s", "~3 min", "0.931"], got
    results = _results_text()
    assert not any(quoted_in(f, results) for f in ("12.5 s", "0.931", "~3 min"))
    assert quoted_in("0.924", "AUC 0.924 |") and not quoted_in("0.92", "AUC 0.924 |")
    assert quoted_in("0.2 s", "(0.2 s)") and not quoted_in("0.2 s", "20.2 s")


def test_readme_has_figures_to_check():
    """Guards the extraction itself: the README quotes dozens of measurements."""
    assert len(figures(README.read_text())) >= 30


def _sections():
    text = RESULTS.read_text()
    heads = list(re.finditer(r"^#{2,3} .*$", text, re.M))
    for h, nxt in zip(heads, heads[1:] + [None]):
        yield h.group(0), text[h.start():nxt.start() if nxt else len(text)]


@pytest.mark.parametrize("heading,body", list(_sections()), ids=lambda v: v[:40])
def test_every_results_section_names_commit_and_date(heading, body):
    assert re.search(r"\bcommits? [0-9a-f]{7,40}\b", body, re.I), f"{heading}: no commit"
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", body), f"{heading}: no date"
    assert re.search(r"bench_\w+\.py|`prep |not recorded|tests/", body), f"{heading}: no command"
