"""Undo what pasting adds to a capture before a parser reads it.

People paste command output into e-mail, chat and docs, and the parsers get it back with every
line quoted (``> ``, ``> > ``, ``>>> ``) or indented as a code block (four spaces in Markdown,
three in reStructuredText). A prefix is removed only when every non-blank line carries it, so a
line of the capture that happens to start with ``>`` or spaces is never cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_QUOTE = re.compile(r"^[ \t]*>(?:[ \t]*>)*[ \t]?")
"""``> ``, ``>> ``, ``> > ``, ``>>> `` (e-mail, chat and Python-prompt quoting)."""


def strip_quoting(lines: Sequence[str]) -> tuple[list[str], str | None]:
    """Lines without a quoting prefix common to every non-blank one, and the prefix removed.

    A quoted blank line is often just ``>`` (no space); it counts as blank. Nested quoting keeps
    its depth: only the levels every line has are removed.
    """
    depths = []
    for line in lines:
        if not line.strip():
            continue
        found = _QUOTE.match(line)
        if found is None:
            return list(lines), None
        if not line[found.end():].strip():
            continue  # a quoted empty line
        depths.append(found.group(0).count(">"))
    if not depths:
        return list(lines), None
    depth = min(depths)
    out = [_unquote(line, depth) for line in lines]
    return out, ">" * depth


def _unquote(line: str, depth: int) -> str:
    """``line`` with ``depth`` quoting marks (and one space after the last) removed."""
    found = _QUOTE.match(line)
    if found is None or found.group(0).count(">") < depth:
        return "" if not line.strip() or found is not None else line  # a blank or a quoted empty line
    position = 0
    for _ in range(depth):
        position = line.index(">", position) + 1
    if line[position:position + 1] in (" ", "\t"):
        position += 1
    return line[position:]


def strip_indent(lines: Sequence[str]) -> tuple[list[str], str]:
    """Lines without the leading whitespace common to every non-blank one, and that whitespace."""
    filled = [line for line in lines if line.strip()]
    if not filled:
        return list(lines), ""
    common = filled[0][: len(filled[0]) - len(filled[0].lstrip())]
    for line in filled[1:]:
        while common and not line.startswith(common):
            common = common[:-1]
    if not common:
        return list(lines), ""
    return [line[len(common):] if line.startswith(common) else line.lstrip() for line in lines], common


def unpaste(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """Quoting, then indentation, removed; with a note for each thing removed."""
    notes = []
    out, quote = strip_quoting(lines)
    if quote:
        notes.append(f"every line was quoted with {quote!r}; the quoting was removed")
    out, indent = strip_indent(out)
    if len(indent) > 1:  # one space is how srun --label pads its task numbers, not a paste
        notes.append(f"every line was indented by {len(indent)} {'tab' if indent == chr(9) else 'character'}"
                     f"{'' if len(indent) == 1 else 's'}; the indentation was removed")
    return out, notes


TERMINAL_WIDTHS = (80, 100, 120, 132, 160, 200, 240)
"""Common terminal widths, named in a note when a wrapped copy's cuts all fell between cells."""


def join_wrapped(groups: Sequence[Sequence[str]], inside_words: bool) -> tuple[list[str], str]:
    """Each group of physical lines (a line and the continuations a terminal wrapped it into)
    joined into one line, and the width it was wrapped at, in words.

    A terminal cuts at exactly its width W. A cut that fell on whitespace joins with a space. With
    ``inside_words``, a cut line that ends in a character where the next piece starts with one is
    taken as cut inside a word at W (the longest such line) and joined directly. Whether that is
    so cannot be told from the text when trailing spaces were trimmed, so the parsers try both and
    keep the reading that checks out. A continuation the terminal indented always joins with a
    space: a word it cut stays cut, and the parser refuses instead of guessing.
    """
    cut_inside = [group[i] for group in groups for i in range(len(group) - 1)
                  if group[i][-1:].strip() and group[i + 1][:1].strip()]
    exact = max((len(line) for line in cut_inside), default=None) if inside_words else None
    joined = []
    for group in groups:
        text = group[0].rstrip()
        for previous, piece in zip(group, group[1:], strict=False):  # each piece after the one before it
            inside = exact is not None and len(previous) == exact and previous[-1:].strip() and piece[:1].strip()
            text = text + piece.rstrip() if inside else f"{text} {piece.strip()}"
        joined.append(text.rstrip())
    if exact is not None:
        return joined, f"{exact} columns"
    longest = max((len(group[i].rstrip()) for group in groups for i in range(len(group) - 1)), default=0)
    near = next((width for width in TERMINAL_WIDTHS if longest <= width < longest + 8), None)
    return joined, f"{near} columns" if near else f"{longest} columns or a little more"
