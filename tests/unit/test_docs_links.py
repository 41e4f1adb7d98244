"""README.md stays a short guide, and every relative link in it and in docs/*.md resolves.

A link's file must exist relative to the file that links it; a `#anchor` must be the GitHub slug of a
heading in the target. The unit tier also runs from a copy of tests/ against an installed wheel, where
no README.md is beside it: the test skips there."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300

# [text](target) or [text](target "title"), the text possibly wrapped; images (![alt](src)) are checked too.
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)((?:(?!\n[ \t]*\n)[^`]|`(?!\1))+?)\1")
_EXTERNAL = ("http://", "https://", "mailto:")


def _prose(text: str) -> str:
    """The text with every fenced code block and every inline code span (which may wrap over lines, never
    over a blank one) overwritten by NULs, newlines kept: each offset and line number stays as it was."""
    lines = []
    fence = ""
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            lines.append("\0" * len(line))
            continue
        if match:
            fence = match.group(1)
            lines.append("\0" * len(line))
            continue
        lines.append(line)
    return _INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", "\0", m.group(0)), "\n".join(lines))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation but hyphens and spaces (and underscores,
    which GitHub keeps) dropped, spaces to hyphens; backticks and link syntax removed first."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's slug in a markdown file, with GitHub's -1, -2... for repeated ones."""
    seen: dict[str, int] = {}
    slugs = set()
    text = path.read_text(encoding="utf-8")
    prose = _prose(text).split("\n")
    for number, line in enumerate(text.split("\n")):
        # Matched on the masked line: a "# comment" in a code block is no heading.
        if not _HEADING.match(prose[number]):
            continue
        match = _HEADING.match(line)
        assert match
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link outside code (fenced blocks and inline spans)."""
    found = []
    text = path.read_text(encoding="utf-8")
    for match in _LINK.finditer(_prose(text)):
        number = text.count("\n", 0, match.start()) + 1
        found.append((number, text[match.start(1) : match.end(1)]))
    return found


def _markdown_files() -> list[Path]:
    if not README.is_file():
        pytest.skip("README.md is not beside tests/ (the unit tier runs here from a copy of tests/)")
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_github_slug() -> None:
    assert github_slug("Day 2: drift, rolling applies, new nodes") == "day-2-drift-rolling-applies-new-nodes"
    assert github_slug("JSON output (`--json`)") == "json-output---json"
    assert github_slug("Built once, shipped everywhere") == "built-once-shipped-everywhere"
    assert github_slug("The node check on the node itself (`node-check`)") == (
        "the-node-check-on-the-node-itself-node-check"
    )
    assert github_slug("`gate_tools` and `node_check`") == "gate_tools-and-node_check"


def test_readme_is_a_short_guide() -> None:
    _markdown_files()
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move reference text into docs/"


def test_every_relative_link_resolves() -> None:
    broken = []
    checked = 0
    for source in _markdown_files():
        for number, target in links(source):
            if target.startswith(_EXTERNAL):
                continue
            checked += 1
            where = f"{source.relative_to(ROOT)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            dest = (source.parent / file_part).resolve() if file_part else source
            if not dest.exists():
                broken.append(f"{where}: {file_part} does not exist")
                continue
            if anchor:
                if dest.is_dir() or dest.suffix != ".md":
                    broken.append(f"{where}: an anchor into something that is not a markdown file")
                elif anchor not in anchors(dest):
                    broken.append(f"{where}: no heading in {dest.name} has the slug #{anchor}")
    assert checked, "no relative links found: the link pattern is broken"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    files = _markdown_files()
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    missing = [str(page.relative_to(ROOT)) for page in files[1:] if page.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
