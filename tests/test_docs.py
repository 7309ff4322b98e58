"""The documentation stays findable and its links stay true.

README.md is the front page: short, and opening with the two commands that set up, serve
and test (scripts/run.sh, then the test suite). Every relative link in README.md, docs/*.md,
the model card and bench/README.md must reach a file or folder of this checkout, and every
``#anchor`` a heading of the page it names, with GitHub's slugs (lower case, punctuation
dropped, spaces to hyphens, ``-1``, ``-2`` ... for repeats). docs/BENCHMARKS.md is a
reference, not a diary: it has a length limit too.

The documentation site (mkdocs.yml) builds with ``mkdocs build --strict``, whose validation
refuses a broken link, anchor or nav entry and a page left out of the nav; the gRPC reference
(docs/grpc-api.md) is what ``python -m protos.document`` writes from the proto's comments.

Every shell command shown in README.md and docs/*.md is run here or marked as an example. A
fenced block in bash, sh, shell or console, or with no language, is a block of commands (a
console block's commands are its ``$`` lines; one without any shows output only), and the line
above it says which it is:

- ``<!-- run -->``: this test runs it from the repository's root, with the installed ``nmt-*``
  commands on PATH: a bash block must exit 0; in a console block each ``$`` command must print
  the lines below it, exactly;
- ``<!-- example -->``, or ``<!-- example: why -->``: shown, not run here (it needs a server, a
  model, Docker, a GPU or hours);
- ``<!-- examples: why -->`` on a line of its own before a page's first block: every block of
  that page is an example (docs/BENCHMARKS.md: benchmark runs).

README.md's opening block is the exception: the test above pins it byte for byte; CI (.ci/run)
runs its set-up and its test command, and tests/test_scripts.py checks how scripts/run.sh refuses.

Each docs page's first shell block is what a reader types first, and it runs as written from a
clean clone: ``python3 scripts/docs_first_blocks.py`` clones HEAD, runs scripts/setup.sh and then
every page's first block (minutes: set-up, exports, servers), one page after another. Those blocks
are marked ``<!-- example: run from a clean clone by scripts/docs_first_blocks.py -->`` (this
test does not run them; a test here checks the mark). The script's docstring has its rules; in
short, a line that starts a server that keeps serving (``bash scripts/run.sh`` without
``DEMO_ONLY``, ``nmt-serve``, ``nmt-http``: a known list) runs in the background until the server
answers on its port (``PORT=``/``--port`` or the default), and everything the page started is
stopped at its end; a line whose trailing comment says ``needs Docker``, ``needs the internet``
or ``needs a GPU`` is skipped, and reported, only where that is absent. Blocks are read by the
script's parser, which this test imports, so both read a page the same way; the tests below check
its classification of the real pages without starting anything.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
MODEL_CARD = ROOT / "models" / "default" / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), MODEL_CARD, ROOT / "bench" / "README.md"]
FIRST_BLOCK = "```bash\nbash scripts/run.sh\nbash scripts/setup.sh && .venv/bin/python -m pytest -q\n```\n"
README_MAX_LINES = 160
BENCHMARKS_MAX_LINES = 400

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


# ---------------------------------------------------------------- the site and the gRPC reference
def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=300)


def test_the_docs_site_builds_strict(tmp_path):
    r = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, "mkdocs build --strict failed:\n" + r.stderr[-4000:]
    for page in ("index.html", "docs/grpc-api.html", "docs/http-api.html", "models/default/index.html",
                 "CHANGELOG.html"):
        assert (tmp_path / "site" / page).is_file(), page


@pytest.mark.parametrize("link, problem", [("b.md#nowhere", "no such anchor"), ("c.md", "not found"),
                                           ("b.md#spaced-out-heading", "MkDocs' own slug, not GitHub's"),
                                           ("b.md#spaced----out-heading", None)])
def test_the_strict_build_refuses_a_broken_link_or_anchor(tmp_path, link, problem):
    """The project's validation settings and hooks on a two-page site: a link to a missing
    page or anchor fails the build; a GitHub anchor (nothing collapsed) passes it."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    site = tmp_path / "project"
    (site / "docs").mkdir(parents=True)
    (site / "README.md").write_text("# Home\n\nSee [a](docs/a.md).\n")
    (site / "docs" / "a.md").write_text(f"# A\n\nSee [b]({link}).\n")
    (site / "docs" / "b.md").write_text("# B\n\n## Spaced -- out heading\n")
    small = {"site_name": "t", "docs_dir": "docs", "use_directory_urls": False, "validation": config["validation"],
             "hooks": [str(ROOT / "scripts" / "mkdocs_hooks.py")],
             "nav": ["README.md", "docs/a.md", "docs/b.md"]}
    (site / "mkdocs.yml").write_text(yaml.safe_dump(small))
    r = mkdocs_build(site / "mkdocs.yml", tmp_path / "out")
    if problem is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0 and link.partition("#")[0] in r.stderr, r.stderr


def test_the_grpc_reference_is_written_from_the_proto():
    r = subprocess.run([sys.executable, "-m", "protos.document", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- commands: run or marked
def _runner():
    """scripts/docs_first_blocks.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_first_blocks", ROOT / "scripts" / "docs_first_blocks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


runner = _runner()
Block, blocks, SHELL_LANGUAGES = runner.Block, runner.blocks, runner.SHELL_LANGUAGES
COMMAND_PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks() -> list[Block]:
    return [b for page in COMMAND_PAGES for b in blocks(page) if b.language in SHELL_LANGUAGES and b.commands]


def test_blocks_and_marks_are_read_as_the_convention_says():
    page = ROOT / "docs" / "x.md"
    text = ("# X\n\n```bash\nnmt-serve\n```\n\n<!-- example: needs a server -->\n```bash\nnmt-translate x\n```\n"
            "<!-- run -->\n\n```console\n$ nmt-serve --version\nnmt-serve 1\n```\n```console\nerror: output only\n```\n"
            "1. a step\n\n   <!-- example -->\n   ```bash\n     torchrun -m training.train\n   ```\n"
            "```\nnmt-export a b\n```\n```python\nimport os\n```\n")
    found = [(b.line, b.language, b.mark, b.commands) for b in blocks(page, text)]
    assert found == [(3, "bash", "", ["nmt-serve"]), (8, "bash", "example", ["nmt-translate x"]),
                     (13, "console", "run", ["nmt-serve --version"]), (17, "console", "", []),
                     (23, "bash", "example", ["  torchrun -m training.train"]), (26, "", "", ["nmt-export a b"]),
                     (29, "python", "", ["import os"])]
    assert [b.mark for b in blocks(page, "<!-- examples: benchmarks -->\n```bash\nx\n```\n")] == ["example"]


def test_every_shell_command_in_the_docs_is_run_or_marked_an_example():
    unmarked = [f"{b.where()}: {b.commands[0].strip()[:70]!r}" for b in shell_blocks()
                if not b.mark and not (b.page == README and b.line == 1)]
    assert not unmarked, ("shell blocks neither run nor marked: put <!-- run --> (this test runs it) or "
                          "<!-- example --> on the line above each:\n" + "\n".join(unmarked))


def run_env() -> dict[str, str]:
    """The installed commands first on PATH (the nmt-* scripts beside this interpreter)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("block", [b for b in shell_blocks() if b.mark == "run"], ids=Block.where)
def test_the_commands_marked_run_do_what_the_docs_show(block: Block):
    if block.language == "console":
        expected: list[tuple[str, list[str]]] = []
        for line in block.lines:
            if line.startswith("$ "):
                expected.append((line[2:], []))
            elif expected:
                expected[-1][1].append(line.rstrip())
        for command, output in expected:
            r = subprocess.run(["bash", "-c", command], cwd=ROOT, env=run_env(), capture_output=True, text=True,
                               timeout=300)
            assert (r.returncode, r.stdout.rstrip("\n").splitlines()) == (0, output), (command, r.stderr[-2000:])
    else:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(block.lines)], cwd=ROOT, env=run_env(),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (block.where(), r.stderr[-2000:])


# ---------------------------------------------------------------- first blocks: scripts/docs_first_blocks.py
def treatment(line) -> str:
    """How scripts/docs_first_blocks.py runs a line: "" as it is; "gRPC 50051" a server waited for on
    its port, with "&" when the runner adds the line's ``&``; "needs Docker" skipped where Docker is absent."""
    how = [f"{line.serves} {line.port}" + (" &" if line.background else "")] if line.serves else []
    return ", ".join(how + [f"needs {need}" for need in line.needs])


FIRST_BLOCKS = {  # page: (its first shell block's fence line, [(logical line, treatment)])
    "BENCHMARKS.md": (9, [(10, ""), (11, ""), (12, "")]),
    "architecture.md": (4, [(5, ""), (6, ""), (7, "")]),
    "deployment.md": (4, [(5, "needs Docker"), (6, "needs Docker"), (7, "needs Docker"), (8, "needs Docker")]),
    "files-and-bulk.md": (4, [(5, "gRPC 50051 &"), (6, ""), (7, ""), (8, "")]),
    "http-api.md": (4, [(5, "gRPC 50051 &"), (6, "HTTP 5000 &"), (7, "")]),
    "operations.md": (4, [(5, ""), (6, "gRPC 50051"), (7, ""), (8, ""), (9, "")]),
    "own-model.md": (4, [(5, ""), (6, "gRPC 50051 &"), (7, "gRPC 50052 &, needs the internet")]),
    "quickstart.md": (4, [(5, "gRPC 50051 &"), (6, ""), (7, "HTTP 5000")]),
    "training.md": (4, [(5, ""), (6, ""), (8, ""), (9, "")]),
    "translate.md": (4, [(5, "gRPC 50051 &"), (6, ""), (7, "")]),
}


def test_the_runner_reads_each_pages_first_block_and_how_to_run_its_lines():
    """Which block is first, which of its lines serve (run in the background, waited for on their
    port) and which need something a machine may lack: the real pages, nothing started."""
    pages = runner.docs_pages(ROOT)
    assert [p.name for p in pages] == list(FIRST_BLOCKS)  # UNICODE.md and grpc-api.md have no shell block
    found = {}
    for page in pages:
        block = runner.first_block(page)
        assert (block.mark, block.why) == ("example", "run from a clean clone by scripts/docs_first_blocks.py"), \
            f"{block.where()}: mark it {runner.MARK_TEXT}"
        found[page.name] = (block.line, [(line.number, treatment(line)) for line in runner.logical_lines(block)])
    assert found == FIRST_BLOCKS


def test_only_first_blocks_carry_the_runners_mark():
    marked = [b.where() for page in COMMAND_PAGES for b in blocks(page) if "docs_first_blocks" in b.why]
    assert marked == [runner.first_block(page).where() for page in runner.docs_pages(ROOT)]


@pytest.mark.parametrize("line, expected", [
    ('echo "a # b" # c', ('echo "a # b"', "c")),
    ("echo 'it''s' x#y", ("echo 'it''s' x#y", "")),
    (r"echo \# not one  # needs a GPU", (r"echo \# not one", "needs a GPU")),
    ("# only a comment", ("", "only a comment")),
])
def test_a_lines_trailing_comment_starts_at_a_word_outside_quotes(line, expected):
    assert runner.split_comment(line) == expected


@pytest.mark.parametrize("command, expected", [
    ("bash scripts/run.sh", ("gRPC", 50051)),
    ("PORT=50052 bash scripts/run.sh", ("gRPC", 50052)),
    ("DEMO_ONLY=1 bash scripts/run.sh", ("", 0)),  # it stops its server itself
    (".venv/bin/nmt-serve --model default=packages/default --port 50061 &", ("gRPC", 50061)),
    ("nmt-serve --port=50062", ("gRPC", 50062)),
    ("NMT_CACHE=off /opt/x/bin/nmt-http --grpc-address 127.0.0.1:50051", ("HTTP", 5000)),
    (".venv/bin/nmt-translate -s en -t de 'nmt-serve'", ("", 0)),
    (".venv/bin/python -m server.main --port 50051", ("", 0)),  # not on the list: the docs show nmt-serve
])
def test_serving_lines_are_the_three_serving_commands_with_their_ports(command, expected):
    assert runner.serving(command) == expected


def test_logical_lines_join_continuations_and_leave_out_comments():
    block = blocks(ROOT / "docs" / "x.md", "# X\n\n```bash\n# set up\nnmt-http \\\n    --port 5001 &  # the page\n\n"
                                           "docker-compose up -d  # needs Docker\n```\n"
                                           "```console\n$ nmt-serve --version\nnmt-serve 1\n```\n")
    lines = runner.logical_lines(block[0])
    assert [(x.number, x.text, x.command, x.serves, x.port, x.background, x.needs) for x in lines] == [
        (5, "nmt-http \\\n    --port 5001 &  # the page", "nmt-http --port 5001 &", "HTTP", 5001, False, ()),
        (8, "docker-compose up -d  # needs Docker", "docker-compose up -d", "", 0, False, ("Docker",))]
    assert [(x.number, x.command) for x in runner.logical_lines(block[1])] == [(11, "nmt-serve --version")]


def test_the_session_backgrounds_a_serving_line_waits_for_it_and_checks_every_status(tmp_path):
    block = runner.first_block(ROOT / "docs" / "quickstart.md")
    lines = runner.logical_lines(block)
    status, clone = tmp_path / "status", tmp_path / "clone"
    script = runner.session_script(lines, [True, True, True], status, 900, clone)
    wait = f"{sys.executable} {runner.__file__} --wait".split()
    check = '__rc=$?; if [ "$__rc" -ne 0 ]; then exit "$__rc"; fi'
    assert script.splitlines()[2:] == [
        "__status start 0", "bash scripts/run.sh &", check,
        "__status wait 0", " ".join([*wait, "gRPC", "50051", '"$!"', "900", str(status), str(clone)]) + " || exit 1",
        "__status start 1", lines[1].text, check,
        "__status start 2", lines[2].text, check,
        "__status wait 2", " ".join([*wait, "HTTP", "5000", '"$!"', "900", str(status), str(clone)]) + " || exit 1",
        "__status end"]


def test_a_page_whose_every_line_needs_what_is_absent_is_skipped_with_the_reason(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deployment.md").write_bytes((ROOT / "docs" / "deployment.md").read_bytes())
    asked = []
    result = runner.run_page("docs/deployment.md", tmp_path, tmp_path, None,
                             lambda need: asked.append(need) or "no engine answers")
    assert (result.status, result.detail) == ("skipped", "needs Docker: no engine answers")
    assert asked == ["Docker"] * 4 and not (tmp_path / "logs").exists()


def test_the_runners_plan_lists_every_page_and_starts_nothing():
    r = subprocess.run([sys.executable, "scripts/docs_first_blocks.py", "--plan"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    headers = [line.split(":")[0] for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert headers == [f"docs/{name}" for name in FIRST_BLOCKS]
