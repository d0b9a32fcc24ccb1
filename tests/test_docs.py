"""The documentation holds together: the module map of docs/architecture.md names every
module of the product once (and nothing that is gone), every relative link between the
README and docs/ reaches a file and, for an #anchor into a Markdown file, a heading there,
and the README stays a front door (at most 250 lines, with a contents list).

Plain file reading: no TensorFlow, no project import."""

import collections
import pathlib
import re
import unicodedata

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
# The product's packages and the command lines; tests/ is not the product.
PRODUCT_DIRS = ("acquisition", "benchmark", "cluster", "hooks", "input_fns", "inspection",
                "models", "pipeline", "reporting", "serving", "scripts")
README_MAX_LINES = 250
MODULE_MAP_HEADING = "## Module map"

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the target has no spaces (an optional "title" after one).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
MODULE = re.compile(r"`((?:%s)/[A-Za-z0-9_/]+\.py)`" % "|".join(PRODUCT_DIRS))


def markdown_files():
    return [README] + sorted(DOCS.rglob("*.md"))


def prose_lines(text):
    """The lines of a Markdown text outside fenced code blocks, as (line number, line)."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading: its text without Markdown marks, lowercased, every
    character but letters, digits, spaces, hyphens and underscores dropped, spaces hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link's text
    text = re.sub(r"\*+", "", text)
    text = unicodedata.normalize("NFC", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 ... for repeats."""
    seen = collections.Counter()
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path):
    """(line number, target) of every link in a Markdown file, code left out."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def broken_links(path):
    """Each relative link of the file that reaches no file, or no heading of its #anchor."""
    broken = []
    for number, target in links(path):
        if SCHEME.match(target):          # http:, https:, mailto:: not this test's to check
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(ROOT)}:{number}: ({target})"
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{where} no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
            continue
        if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{where} no heading #{anchor} in {linked.relative_to(ROOT)}")
    return broken


def product_modules():
    return sorted(str(p.relative_to(ROOT)) for d in PRODUCT_DIRS for p in (ROOT / d).rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def module_map_lines():
    """The lines of architecture.md's module map section, up to the next heading of its level."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").split("\n")
    assert MODULE_MAP_HEADING in lines, f"docs/architecture.md has no '{MODULE_MAP_HEADING}' section"
    start = lines.index(MODULE_MAP_HEADING) + 1
    section = []
    for line in lines[start:]:
        if re.match(r"#{1,2} ", line):
            break
        section.append(line)
    return section


def mapped_modules():
    return [m for line in module_map_lines() for m in MODULE.findall(line)]


def test_module_map_names_every_module():
    modules = product_modules()
    assert len(modules) > 50, modules              # the walk found the product
    missing = sorted(set(modules) - set(mapped_modules()))
    assert not missing, f"modules missing from docs/architecture.md's module map: {missing}"


def test_module_map_names_only_modules_that_exist():
    gone = sorted(m for m in set(mapped_modules()) if not (ROOT / m).is_file())
    assert not gone, f"the module map names modules that do not exist: {gone}"


def test_module_map_names_each_module_once():
    twice = sorted(m for m, n in collections.Counter(mapped_modules()).items() if n > 1)
    assert not twice, f"the module map names these more than once: {twice}"


def test_module_map_gives_each_module_a_line_of_its_own():
    for line in module_map_lines():
        found = MODULE.findall(line)
        assert len(found) <= 1, f"one module a line in the module map: {line!r}"
        if found:
            described = line.split(f"`{found[0]}`", 1)[1].strip(" :-—")
            assert len(described) > 10, f"{found[0]} has no description in the module map"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert not broken_links(path), "\n".join(broken_links(path))


def test_readme_and_docs_link_each_other():
    readme_targets = {t.partition("#")[0] for _, t in links(README)}
    assert "docs/index.md" in readme_targets
    index_targets = {t.partition("#")[0] for _, t in links(DOCS / "index.md")}
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md")
    unlisted = [p for p in pages if p not in index_targets]
    assert not unlisted, f"docs/index.md lists no line for: {unlisted}"


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, more than {README_MAX_LINES}"
    top = "\n".join(lines[:40])
    assert re.search(r"^\**contents\**", top, re.I | re.M), "no contents list near the top of README.md"
    own = {t[1:] for _, t in links(README) if t.startswith("#")}
    sections = {slug(m.group(2)) for _, line in prose_lines("\n".join(lines))
                if (m := HEADING.match(line)) and len(m.group(1)) == 2}
    assert sections, "README.md has no sections"
    unlisted = sorted(sections - own)
    assert not unlisted, f"README.md's contents list leaves out: {unlisted}"
    own_images = next(n for n, line in enumerate(lines) if line.startswith("## Your own images"))
    assert own_images < 80, f"the own-images section starts at line {own_images + 1}: not on the first screens"


def test_slug_follows_github():
    assert slug("Reproducing a run bit for bit (`--deterministic`)") == "reproducing-a-run-bit-for-bit---deterministic"
    assert slug("The first run (`scripts/train_fashion.py` with no flags, offline)") == \
        "the-first-run-scriptstrain_fashionpy-with-no-flags-offline"
    assert slug("MFU: every throughput against the machine's peak (AMD EPYC, 2026-11-23)") == \
        "mfu-every-throughput-against-the-machines-peak-amd-epyc-2026-11-23"
