"""The DAGs that README.md and the manual show are the example DAGs the tests run, never typed twice.

The manual (docs/) includes them with pymdownx.snippets (mkdocs.yml), a code block holding
``--8<-- "dags_examples/<file>:<section>"``. GitHub renders README.md without snippets, so README holds
a copy, marked by a comment that names its source the same way, and the copy must stay byte-identical
to what it names.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = "dags_examples/"
# A block "shows a DAG" when it declares one; operator snippets without a DAG are left alone.
DECLARES_DAG = re.compile(r"^@dag\b|\bDAG\(", re.MULTILINE)
# README's mark above a copy: <!-- dags_examples/sms_first_campaign.py:code (a copy: ...) -->
COPY_MARK = re.compile(r"^<!-- (?P<source>[\w./-]+\.py):(?P<section>[a-z][-_0-9a-z]*) \(a copy: .*-->$")
# The manual's include line inside a code block.
INCLUDE = re.compile(r'^--8<-- "(?P<source>[^":]+)(?::(?P<section>[a-z][-_0-9a-z]*))?"$')
# A section marker in a source file, as pymdownx.snippets reads it (text may follow it on the line).
SECTION_MARK = re.compile(r"--8<-- \[(?P<kind>start|end):(?P<name>[a-z][-_0-9a-z]*)\]")


@dataclass
class CodeBlock:
    """A fenced ``python`` block of a Markdown file.

    :param where: the file and the line of its opening fence, for messages.
    :param text: its lines, each ending in a newline.
    :param line_before: the line just above the fence.
    """

    where: str
    text: str
    line_before: str


def python_blocks(path: Path) -> list[CodeBlock]:
    """The fenced ``python`` blocks of a Markdown file, indented ones (in a list item) included.

    :param path: the Markdown file.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    opening: int | None = None
    indent = ""
    for number, line in enumerate(lines):
        stripped = line.strip()
        if opening is None and stripped == "```python":
            opening, indent = number, line[: len(line) - len(line.lstrip())]
        elif opening is not None and stripped == "```":
            body = "".join(f"{text.removeprefix(indent)}\n" for text in lines[opening + 1 : number])
            before = lines[opening - 1] if opening else ""
            blocks.append(CodeBlock(f"{path.relative_to(REPO)}:{opening + 1}", body, before))
            opening = None
    return blocks


def section(source: str, name: str) -> str:
    """What a snippet ``source:name`` includes: the lines between its start and end markers.

    Markers of other sections inside it are left out, as pymdownx.snippets leaves them out.

    :param source: the file, relative to the repository's root.
    :param name: the section's name.
    """
    kept: list[str] = []
    inside = found = False
    for line in (REPO / source).read_text(encoding="utf-8").splitlines(keepends=True):
        mark = SECTION_MARK.search(line)
        if mark is None:
            if inside:
                kept.append(line)
        elif mark["name"] == name:
            if mark["kind"] == "end":
                break
            inside = found = True
    assert found, f"{source} has no section {name!r} (a line with --8<-- [start:{name}])"
    return "".join(kept)


def test_readme_shows_copies_of_the_example_dags_exactly() -> None:
    readme = REPO / "README.md"
    dag_blocks = [block for block in python_blocks(readme) if DECLARES_DAG.search(block.text)]
    assert dag_blocks, "README.md shows no DAG: this test would check nothing"
    for block in dag_blocks:
        mark = COPY_MARK.match(block.line_before)
        assert mark, (
            f"{block.where}: a DAG typed into README.md; show a section of a dags_examples/ file instead,"
            f" with '<!-- dags_examples/<file>.py:<section> (a copy: tests/unit/test_docs.py checks it) -->'"
            f" on the line above the block"
        )
        assert mark["source"].startswith(EXAMPLES), f"{block.where}: copies {mark['source']}, not an example"
        expected = section(mark["source"], mark["section"])
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                block.text.splitlines(keepends=True),
                fromfile=f"{mark['source']}:{mark['section']}",
                tofile=block.where,
            )
        )
        assert block.text == expected, f"README.md's copy differs from its source:\n{diff}"


def test_the_manual_includes_the_example_dags_instead_of_typing_them() -> None:
    included: list[tuple[str, str | None]] = []
    for page in sorted((REPO / "docs").glob("*.md")):
        for block in python_blocks(page):
            includes = [m for line in block.text.splitlines() if (m := INCLUDE.match(line))]
            included += [(m["source"], m["section"]) for m in includes]
            if not includes:
                assert not DECLARES_DAG.search(block.text), (
                    f"{block.where}: a DAG typed into the manual; include it from dags_examples/ with"
                    f' --8<-- "dags_examples/<file>.py:<section>"'
                )
    assert included, "the manual includes no example DAG: this test would check nothing"
    for source, name in included:
        assert source.startswith(EXAMPLES), f"the manual includes {source}: only the tested examples"
        assert (REPO / source).is_file(), f"the manual includes {source}, which does not exist"
        if name is not None:
            assert DECLARES_DAG.search(section(source, name)), f"{source}:{name} shows no DAG"
