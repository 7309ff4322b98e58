"""MkDocs hooks (mkdocs.yml ``hooks:``) that build the site from the pages as they stand in the
repository, so that one set of relative links works on GitHub and on the site.

- The site's files are README.md (the home page), the pages under docs/ and those the nav
  names (CHANGELOG.md), and every file of the checkout that those pages link to, followed from
  page to page (the model card, bench/README.md, images, and the source files some pages point
  at), each at its path from the repository's root: ``docs/quickstart.md``'s ``../README.md``
  is the home page on the site as on GitHub. MkDocs' own scan of docs_dir is replaced; the
  theme's files stay.
- Headings get GitHub's anchors (lower case, punctuation dropped, each space a hyphen, nothing
  collapsed), so that a ``#anchor`` checked by MkDocs' link validation is the one GitHub makes.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), a target optionally in <...> and followed by a "title"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto: ...


def github_slug(value: str, separator: str = "-") -> str:
    """GitHub's anchor of a heading's text (MkDocs' toc passes the text without its markup)."""
    text = re.sub(r"[^\w\- ]", "", value.strip().lower())
    return text.replace(" ", separator)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config


def linked_files(page: Path, root: Path) -> list[Path]:
    """The files of the checkout that a Markdown page links to (outside code), without anchors."""
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    out = []
    for m in LINK.finditer(text):
        target = m.group(1).partition("#")[0]
        if not target or EXTERNAL.match(target) or target.startswith("/"):
            continue  # an anchor on the same page, another site, or a path MkDocs reports itself
        path = (page.parent / target).resolve()
        if path.is_file() and path.is_relative_to(root):
            out.append(path)
    return out


def nav_pages(nav: object) -> list[str]:
    """The paths that mkdocs.yml's nav names (a nested list of titles to paths)."""
    if isinstance(nav, str):
        return [] if EXTERNAL.match(nav) else [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    if isinstance(nav, list):
        return [p for value in nav for p in nav_pages(value)]
    return []


def site_files(root: Path, docs_dir: Path, named: list[str]) -> list[Path]:
    """README.md, every file under docs_dir, the pages the nav names, and every file they link
    to, transitively."""
    todo = [root / "README.md", *sorted(p for p in docs_dir.rglob("*") if p.is_file())]
    todo += [root / name for name in named if (root / name).is_file()]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.suffix == ".md":
            todo += linked_files(path, root)
    return sorted(seen)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = Path(config.config_file_path).resolve().parent
    docs_dir = Path(config.docs_dir).resolve()
    kept = [f for f in files if not (f.abs_src_path and Path(f.abs_src_path).resolve().is_relative_to(docs_dir))]
    ours = [File(path.relative_to(root).as_posix(), str(root), config.site_dir, config.use_directory_urls)
            for path in site_files(root, docs_dir, nav_pages(config.nav))]
    return Files(kept + ours)
