"""The documentation stays findable and its links stay true.

README.md is the front page: short, and opening with the two commands that set up, serve
and test (scripts/run.sh, then the test suite). Every relative link in README.md, docs/*.md,
the model card and bench/README.md must reach a file or folder of this checkout, and every
``#anchor`` a heading of the page it names, with GitHub's slugs (lower case, punctuation
dropped, spaces to hyphens, ``-1``, ``-2`` ... for repeats). docs/BENCHMARKS.md is a
reference, not a diary: it has a length limit too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
MODEL_CARD = ROOT / "models" / "default" / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), MODEL_CARD, ROOT / "bench" / "README.md"]
FIRST_BLOCK = "```bash\nbash scripts/run.sh\nbash scripts/setup.sh && .venv/bin/python -m pytest -q\n```\n"
README_MAX_LINES = 160
BENCHMARKS_MAX_LINES = 450

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`]*`")
# [text](target) and ![alt](target); a target may be followed by a "title"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto: ...


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def prose(text: str) -> str:
    """The text with fenced code blocks and inline code blanked out, line numbers kept."""
    kept = dict(prose_lines(text))
    lines = [kept.get(n, "") for n in range(1, len(text.splitlines()) + 1)]
    return CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(lines))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as rendered, lower case, without punctuation
    (letters, digits, spaces, hyphens and underscores stay), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link outside code; a link's text may run over several lines."""
    text = prose(page.read_text(encoding="utf-8"))
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def test_slugs_follow_github():
    assert slug("The main table on a Xeon with AMX (format 4)") == "the-main-table-on-a-xeon-with-amx-format-4"
    assert slug("`nmt-translate`: files, one line a line") == "nmt-translate-files-one-line-a-line"
    assert slug("Zen 5 -> Zen 4") == "zen-5---zen-4"
    assert slug("What [the docs](x.md) say") == "what-the-docs-say"


def test_readme_is_short_and_opens_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert text.startswith(FIRST_BLOCK), "README.md must open with the set-up block, byte for byte:\n" + FIRST_BLOCK
    lines = text.count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; keep it under {README_MAX_LINES} (detail: docs/)"


def test_model_card_keeps_the_quality_gate_section():
    # tests/test_default_model.py points at it for the scores its floors sit under
    headings = [m.group(2) for _, line in prose_lines(MODEL_CARD.read_text(encoding="utf-8"))
                if (m := HEADING.match(line))]
    assert "Quality gate" in headings


def test_benchmarks_page_is_a_reference_not_a_diary():
    lines = BENCHMARKS.read_text(encoding="utf-8").count("\n")
    assert lines < BENCHMARKS_MAX_LINES, f"docs/BENCHMARKS.md has {lines} lines; the limit is {BENCHMARKS_MAX_LINES}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_exists(page: Path):
    broken = []
    for number, target in links(page):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_pages_the_readme_promises_exist():
    text = README.read_text(encoding="utf-8")
    for name in ("quickstart", "translate", "http-api", "files-and-bulk", "own-model", "training", "deployment",
                 "operations", "architecture", "BENCHMARKS"):
        assert f"docs/{name}.md" in text, f"README.md does not link docs/{name}.md"
