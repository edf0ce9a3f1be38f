"""The documents a student reads: short enough to read in an hour, and pointing only at what exists.

Sizes: README.md at most 12,000 characters; each track guide (docs/guide-*.md) at most 35,000.
Sentences: README.md, docs/course.md and the track guides average at most 25 words a sentence.
The reading path: README.md whole, then the student's track guide from its top to the end of the
rmsnorm_kernel section (the first kernel's contract), at most 250 lines as rendered 100 columns wide.
Links: every relative link (and its #anchor) and every repository path or module written in backticks
in README.md, GUIDE.md, docs/*.md (not docs/gpu_runs/, which are records) and the track folders'
READMEs exists; so does every guide link a template kernel's TODO error prints.

Each check is a function returning what is wrong; the tests run it on the documents and on a synthetic
document broken the way it guards against, so no check can pass by measuring nothing.

    python tests/test_docs.py        # prints every figure: characters, words a sentence, path lines
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README_MAX_CHARS = 12_000
GUIDE_MAX_CHARS = 35_000
MAX_WORDS_PER_SENTENCE = 25.0
READING_PATH_MAX_LINES = 250
RENDER_COLUMNS = 100
TRACK_GUIDES = {"triton": "docs/guide-triton.md", "cutile": "docs/guide-cutile.md"}
FIRST_KERNEL = "rmsnorm_kernel"
# Documents held to the sentence limit: the map and what a student reads for their track.
SHORT_SENTENCE_DOCS = ["README.md", "docs/course.md", *TRACK_GUIDES.values()]
# Abbreviations whose period does not end a sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.")


def linked_docs() -> list[Path]:
    """Every document whose links and paths must exist."""
    docs = [REPO / "README.md", REPO / "GUIDE.md", *sorted((REPO / "docs").glob("*.md"))]
    return docs + sorted(REPO.glob("glm_asr_*/README.md"))


# ---------------------------------------------------------------- prose: sentences and their words

FENCE = re.compile(r"^\s*(```|~~~)")


def prose_blocks(text: str) -> list[str]:
    """The running text of a markdown document, one string per paragraph or list item.

    Left out: fenced code, tables, headings, HTML lines (anchors), images. A link counts as its text."""
    blocks: list[list[str]] = []
    current: list[str] = []
    in_code = False

    def close():
        if current:
            blocks.append(current[:])
            current.clear()

    for line in text.splitlines():
        if FENCE.match(line):
            in_code = not in_code
            close()
            continue
        stripped = line.strip()
        if in_code or not stripped or stripped.startswith(("|", "#", "<", "![", "---")):
            close()
            continue
        stripped = re.sub(r"^>\s?", "", stripped)
        if re.match(r"^([*+-]|\d+\.)\s", stripped):  # a list item starts a block of its own
            close()
            stripped = re.sub(r"^([*+-]|\d+\.)\s+", "", stripped)
        current.append(stripped)
    close()
    return [" ".join(block) for block in blocks]


def sentence_word_counts(text: str) -> list[int]:
    """Words in each sentence of the document's prose (code spans count their words too).

    A sentence ends at . ! or ? followed by a space (not after e.g., i.e., etc.), or at the end of its
    paragraph or list item, so a list item without a full stop is a sentence of its own."""
    counts = []
    for block in prose_blocks(text):
        block = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", block)
        # A code span is its words, with dots hidden so that `a.b` ends no sentence.
        block = re.sub(r"`([^`]*)`", lambda m: " ".join("w" for _ in m.group(1).split()) or "w", block)
        for abbreviation in ABBREVIATIONS:
            block = block.replace(abbreviation, abbreviation.replace(".", ""))
        for sentence in re.split(r"(?<=[.!?])[\"')\]*]*\s+", block):
            words = sentence.split()
            if words:
                counts.append(len(words))
    return counts


def words_per_sentence(text: str) -> float:
    counts = sentence_word_counts(text)
    return sum(counts) / len(counts) if counts else 0.0


# ---------------------------------------------------------------- the reading path


def rendered_lines(text: str) -> int:
    """Lines as read in a 100-column window: a long source line counts for each 100 characters."""
    return sum(max(1, math.ceil(len(line) / RENDER_COLUMNS)) for line in text.splitlines())


def through_section(text: str, heading: str) -> str:
    """The document from its top to the end of the section whose heading starts with `heading`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if re.match(rf"^#+\s+{re.escape(heading)}\b", line)), None)
    if start is None:
        raise ValueError(f"no heading {heading!r}")
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(rf"^#{{1,{level}}}\s", lines[i])), len(lines))
    return "\n".join(lines[:end])


def reading_path(readme: str, guide: str) -> str:
    return readme + "\n" + through_section(guide, FIRST_KERNEL)


# ---------------------------------------------------------------- links, anchors, paths


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_code = not in_code
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading and not in_code:
            base = slug(heading.group(1))
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return found


def outside_code(text: str) -> str:
    return "\n".join(line for line, code in zip(text.splitlines(), code_lines(text)) if not code)


def code_lines(text: str) -> list[bool]:
    """For each line, whether it lies in a fenced code block (the fences included)."""
    flags, in_code = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            flags.append(True)
            in_code = not in_code
        else:
            flags.append(in_code)
    return flags


def broken_links(doc: Path, text: str) -> list[str]:
    """Relative links whose file, or whose #anchor in a markdown file, does not exist."""
    problems = []
    prose = re.sub(r"`[^`]*`", "", outside_code(text))
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            problems.append(f"{doc.relative_to(REPO)}: link to missing {target}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{doc.relative_to(REPO)}: no anchor #{anchor} in {path or doc.name}")
    return problems


def tracked_top_level() -> set[str]:
    """The repository's own top-level names: a backticked path starting with one is checked."""
    try:
        files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return {name.split("/")[0] for name in files.split()}
    except (OSError, subprocess.CalledProcessError):
        return {p.name for p in REPO.iterdir()}


PLACEHOLDER = re.compile(r"[A-Z]{3,}|…|\*|\{|<|\.\.\.")


def missing_paths(doc: Path, text: str, top_level: set[str]) -> list[str]:
    """Repository paths (`utils/test.sh`) and modules (`glm_asr_lab.make_template`) named in inline code
    or in code blocks that do not exist. Placeholders (FOLDER, NAME, …) are not checked."""
    spans = re.findall(r"`([^`\n]+)`", outside_code(text))
    spans += [line for line, code in zip(text.splitlines(), code_lines(text)) if code]
    problems = []
    for span in spans:
        for token in span.split():
            token = re.sub(r"[\"'(),;:\[\].]+$", "", re.sub(r"^[\"'(\[]+", "", token)).split("::")[0]
            token = re.sub(r"(\.py|\.sh):\w+$", r"\1", token)  # file.py:function
            token = re.sub(r"^[A-Z_]+=", "", token)  # ENV=value prefixes
            if PLACEHOLDER.search(token) or token.startswith(("-", "/", "~", "http")):
                continue
            head = re.split(r"[/.]", token)[0]
            if head not in top_level or token in top_level:
                continue
            if "/" in token or token.endswith((".md", ".sh", ".py", ".toml", ".wav", ".txt")):
                if not (REPO / token.split(":")[0]).exists():
                    problems.append(f"{doc.relative_to(REPO)}: no such path {token}")
            elif re.fullmatch(r"\w+(\.\w+)+", token) and not module_exists(token):
                problems.append(f"{doc.relative_to(REPO)}: no such module or name {token}")
    return problems


def module_exists(dotted: str) -> bool:
    """A dotted name resolves: the longest prefix that is a module or package, then at most two names
    (a class and its method) that its source defines."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if source.exists():
            rest = parts[cut:]
            text = source.read_text()
            return len(rest) <= 2 and all(re.search(rf"^\s*(def |class )?{name}\b", text, re.M) for name in rest)
    return False


def guide_links_of_templates() -> list[tuple[Path, str]]:
    """The guide link each template kernel's TODO error prints (its @student_kernel guide=...)."""
    found = []
    for path in sorted(REPO.glob("glm_asr_*_template/*.py")):
        found += [(path, link) for link in re.findall(r'guide="([^"]+)"', path.read_text())]
    return found


# ---------------------------------------------------------------- the documents


def text_of(relative: str) -> str:
    return (REPO / relative).read_text()


def test_readme_is_a_short_map():
    assert len(text_of("README.md")) <= README_MAX_CHARS


@pytest.mark.parametrize("guide", TRACK_GUIDES.values())
def test_each_track_guide_fits_its_limit(guide):
    assert len(text_of(guide)) <= GUIDE_MAX_CHARS


@pytest.mark.parametrize("doc", SHORT_SENTENCE_DOCS)
def test_sentences_are_short_on_average(doc):
    assert words_per_sentence(text_of(doc)) <= MAX_WORDS_PER_SENTENCE


@pytest.mark.parametrize("track", TRACK_GUIDES)
def test_the_reading_path_to_the_first_kernel_is_short(track):
    path = reading_path(text_of("README.md"), text_of(TRACK_GUIDES[track]))
    assert f"### {FIRST_KERNEL}" in path and rendered_lines(path) <= READING_PATH_MAX_LINES


def test_the_readme_leads_to_both_guides():
    readme = text_of("README.md")
    assert all(f"]({guide})" in readme for guide in TRACK_GUIDES.values())


@pytest.mark.parametrize("doc", linked_docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_paths_exist(doc):
    text = doc.read_text()
    assert broken_links(doc, text) + missing_paths(doc, text, tracked_top_level()) == []


def test_every_todo_error_links_to_an_existing_guide_section():
    links = guide_links_of_templates()
    assert len(links) == 22  # eleven kernels in each of the two templates
    for path, link in links:
        file, _, anchor = link.partition("#")
        assert anchor in anchors(text_of(file)), f"{path.name}: {link}"


# ---------------------------------------------------------------- each check fails when broken


def test_sentence_check_catches_long_sentences_and_ignores_code_and_tables():
    long_sentence = " ".join(["word"] * 40) + "."
    assert words_per_sentence(long_sentence) == 40
    short = "One two three. Four five, e.g. six seven! Eight?\n\n* a list item\n* another one"
    assert sentence_word_counts(short) == [3, 5, 1, 3, 2]
    noise = "```\n" + " ".join(["code"] * 100) + "\n```\n| a | " + " ".join(["cell"] * 100) + " |\n# " + "h " * 99
    assert sentence_word_counts(noise + "\nShort one.") == [2]
    assert sentence_word_counts("Run `python -m glm_asr_lab.make_template --check` now.") == [6]


def test_size_and_path_checks_catch_a_long_document():
    long_readme = "word " * (README_MAX_CHARS // 5 + 1)
    assert len(long_readme) > README_MAX_CHARS
    guide = "# Guide\n" + "line\n" * 300 + f"### {FIRST_KERNEL}\ncontract\n### layernorm_kernel\nmore\n"
    assert through_section(guide, FIRST_KERNEL).endswith("contract")
    assert rendered_lines(reading_path("# README\n", guide)) > READING_PATH_MAX_LINES
    assert rendered_lines("x" * 250) == 3  # a long line is not one line of reading
    with pytest.raises(ValueError):
        through_section("# no kernel here\n", FIRST_KERNEL)


def test_link_check_catches_missing_files_and_anchors():
    doc = REPO / "docs" / "course.md"
    text = ("[a](missing.md) [b](../README.md#no-such-section) [c](guide-triton.md#rmsnorm_kernel) "
            "[d](https://example.org) `[e](missing-in-code.md)`")
    assert broken_links(doc, text) == ["docs/course.md: link to missing missing.md",
                                       "docs/course.md: no anchor #no-such-section in ../README.md"]
    assert {"1-set-up-and-look-around", "rmsnorm_kernel-cutile", "why-two"} <= anchors(
        "## 1. Set up and look around\n### rmsnorm_kernel (cuTile)\n<a id=\"why-two\"></a>")
    assert anchors("## Tests\n## Tests\n") == {"tests", "tests-1"}


def test_path_check_catches_stale_paths_and_modules():
    top = tracked_top_level()
    text = ("`utils/gpu_parity.py`, `glm_asr_common/model/engine.py`, `python -m glm_asr_lab.no_such_tool`, "
            "`glm_asr_course.model.config.NoSuchClass`\n```bash\npython glm_asr_triton_template/nothing.py\n```\n"
            "fine: `utils/test.sh`, `glm_asr_course.model.config.ModelConfig`, `reports/FOLDER/report.md`, "
            "`glm_asr_lab/grading/grading_worker.py:time_transcriptions`, `layers.py`")
    problems = missing_paths(REPO / "README.md", text, top | {"glm_asr_common"})
    assert [p.split()[-1] for p in problems] == ["utils/gpu_parity.py", "glm_asr_common/model/engine.py",
                                                 "glm_asr_lab.no_such_tool", "glm_asr_course.model.config.NoSuchClass",
                                                 "glm_asr_triton_template/nothing.py"]


if __name__ == "__main__":
    docs = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))
    for relative in dict.fromkeys(["README.md", *TRACK_GUIDES.values(), *docs]):
        if (REPO / relative).exists():
            text = text_of(relative)
            counts = sentence_word_counts(text)
            print(f"{relative:32} {len(text):7,} chars  {words_per_sentence(text):5.1f} words/sentence "
                  f"({sum(c >= 50 for c in counts)} of 50+)  {rendered_lines(text):5} lines")
    for track, guide in TRACK_GUIDES.items():
        if (REPO / guide).exists():
            print(f"reading path ({track}): {rendered_lines(reading_path(text_of('README.md'), text_of(guide)))} lines")
