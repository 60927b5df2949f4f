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
