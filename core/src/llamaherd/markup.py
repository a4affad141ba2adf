"""Console markup (``"[red]failed[/] 3s ago"``, rich's syntax) written and read without
importing rich: commands build their views as markup, and only a terminal needs rich to draw
them. Piped (``al stat | grep``), ``plain`` turns the same markup into its text.
"""

from __future__ import annotations

import re

# A tag: "[" then a lower-case letter, "#", "/" or "@", up to the next "]" with no "[" between;
# the backslashes before it escape it when odd in number (rich's grammar).
_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


def escape(text: str) -> str:
    """``text`` as markup that shows it as it is (each tag-like ``[...]`` escaped)."""

    def escaped(match: re.Match[str]) -> str:
        backslashes = match.group(1)
        return f"{backslashes}{backslashes}\\[{match.group(2)}]"

    found = _TAG.sub(escaped, text)
    # A trailing lone backslash would escape the tag that follows when this text is embedded.
    return found + "\\" if found.endswith("\\") and not found.endswith("\\\\") else found


def plain(markup: str) -> str:
    """The text ``markup`` shows: its tags dropped, its escapes undone."""
    if "[" not in markup:
        return markup
    pieces, position = [], 0
    for match in _TAG.finditer(markup):
        backslashes, odd = divmod(len(match.group(1)), 2)
        pieces += [_unescaped(markup[position : match.start()]), "\\" * backslashes]
        if odd:  # an escaped tag is text
            pieces.append(f"[{match.group(2)}]")
        position = match.end()
    pieces.append(_unescaped(markup[position:]))
    return "".join(pieces)


def _unescaped(text: str) -> str:
    """Text between tags: a backslash before a "[" that opens no tag escapes it all the same."""
    return text.replace("\\[", "[")
