"""The repository carries its own documentation (docs/, issue 13).

* No tracked file outside docs/ refers to the background notes that live outside the repository (the method
  specifications and research notes the project was first built from): users do not have them, so code, tests and
  scripts cite docs/ sections or the papers instead.
* Every relative link in README.md and docs/ points to an existing file, and to an existing section when it names one
  (GitHub's heading anchors); so does every ``docs/<page>.md#<section>`` cited in the code.
* The README links every method page.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# What a reference to the outside notes looks like: the folder they lived in, their file names (a bare name, not a
# docs/ page of the same name such as docs/methods/eam.md) and their section numbers ("§C.4").
# (spelled with [_] and [e] so that this file does not itself name them)
OUTSIDE_REFERENCE = re.compile(
    r"\.\./shar[e]d|shar[e]d/(?:spec|research)"
    r"|(?<![\w/.-])(?:jagg[_]grpo|flash[_]grpo|eam|ecosyste[m]|cpu[_]stack|slurm[_]single_node|gpu[_]machine)\.md"
    r"|cpu[_]stack|slurm[_]single_node|spe[c] §|§[A-H]"
)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_CITATION = re.compile(r"\bdocs/[\w./-]+\.md(?:#[\w-]+)?")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in out.decode().split("\0") if name]


def read_text(rel: str) -> str | None:
    path = ROOT / rel
    if not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data[:4096]:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, re.sub(r"`[^`]*`", "", line)))
    return out


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: link markup reduced to its text, lower case, punctuation dropped (letters,
    digits, underscores, hyphens and spaces kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        slug = github_anchor(match.group(1))
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def check_target(target: Path, anchor: str, where: str) -> str | None:
    """None if ``target`` (and its section ``anchor``) exists, else what is wrong."""
    target = target.resolve()
    if not target.is_relative_to(ROOT):
        return f"{where}: {target} is outside the repository"
    if not target.exists():
        return f"{where}: {target.relative_to(ROOT)} does not exist"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{where}: {target.relative_to(ROOT)} has no section #{anchor}"
    return None


def test_no_tracked_file_outside_docs_refers_to_notes_outside_the_repository():
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()
    offending = []
    for rel in tracked_files():
        if rel.startswith("docs/") or rel == this:
            continue
        text = read_text(rel)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_REFERENCE.search(line):
                offending.append(f"{rel}:{number}: {line.strip()}")
    assert not offending, (
        "these lines cite notes outside the repository; cite the docs/ section (or the paper) "
        "that holds the content instead:\n" + "\n".join(offending)
    )


def test_the_pattern_tells_outside_notes_from_docs_pages():
    assert OUTSIDE_REFERENCE.search("(spec " + "eam.md §C.4)") and OUTSIDE_REFERENCE.search("see `flash_" + "grpo.md`")
    assert OUTSIDE_REFERENCE.search("cpu" + "_stack §9.11") and OUTSIDE_REFERENCE.search(
        "../" + "shar" + "ed/research/x.md"
    )
    assert not OUTSIDE_REFERENCE.search("docs/methods/eam.md#the-kernel")
    assert not OUTSIDE_REFERENCE.search("docs/methods/flash_grpo.md#metrics, (methods/jagg.md)")


def test_relative_links_in_readme_and_docs_resolve():
    broken = []
    for page in markdown_pages():
        for number, line in prose_lines(page.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                resolved = page if not path else page.parent / path
                problem = check_target(resolved, anchor, f"{page.relative_to(ROOT)}:{number} ({target})")
                if problem:
                    broken.append(problem)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_sections_cited_in_code_exist():
    broken = []
    for rel in tracked_files():
        if rel.startswith("docs/") or rel.endswith(".md"):
            continue
        text = read_text(rel)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for citation in CODE_CITATION.findall(line):
                path, _, anchor = citation.partition("#")
                problem = check_target(ROOT / path, anchor, f"{rel}:{number} ({citation})")
                if problem:
                    broken.append(problem)
    assert not broken, "code cites docs sections that do not exist:\n" + "\n".join(broken)


def test_readme_links_every_method_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (DOCS / "methods").glob("*.md"))
    assert pages, "docs/methods/ holds no page"
    assert not [p for p in pages if p not in linked], "the README's Methods section must link every method page"


def test_github_anchor():
    assert github_anchor("Publishing to W&B") == "publishing-to-wb"
    assert (
        github_anchor("JAGG: Jacobian-Aggregated Group Gradient (`method=jagg`)")
        == "jagg-jacobian-aggregated-group-gradient-methodjagg"
    )
    assert github_anchor("The noise scale sigma_t") == "the-noise-scale-sigma_t"
