"""Every error message core and the first-party plugins raise is in docs/troubleshooting.md.

The messages are found with ``ast``: each ``raise X(...)`` of a user-facing error class, its
message argument (a string, an f-string or a concatenation). The longest literal piece of the
message must appear verbatim on the page, so a reworded or new message fails here until the page
says what it means. Pieces shorter than MIN_PIECE characters (e.g. "cannot read") say too little
to check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import DOCS, ROOT

# Error class -> index of its message argument.
ERRORS = {
    "LlamaherdError": 0,
    "ConfigError": 2,
    "SandboxError": 0,
    "StoreError": 0,
    "RunFailed": 0,
    "CredentialError": 0,
    "CredentialInvalid": 0,
    "Conflict": 0,
    "CommandFailed": 0,
    "SshError": 0,
    "SandboxBusy": 0,
    "SandboxLost": 0,
}
MIN_PIECE = 8
# Test helpers, not messages a user sees.
SKIP = {"testing.py", "testing_fakes.py"}


def sources() -> list[Path]:
    files = [*(ROOT / "core" / "src" / "llamaherd").rglob("*.py")]
    files += ROOT.glob("plugins/*/src/**/*.py")
    return sorted(f for f in files if f.name not in SKIP)


def pieces(node: ast.AST) -> list[str]:
    """The literal text of a message expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return pieces(node.left) + pieces(node.right)
    return []


def messages() -> Iterator[tuple[str, str]]:
    """(where, longest literal piece) of every raised user-facing error."""
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            index = ERRORS.get(name or "")
            if index is None or len(node.exc.args) <= index:
                continue
            texts = [p.strip(" :;,.()'\"") for p in pieces(node.exc.args[index])]
            piece = max(texts, key=len, default="")
            if len(piece) >= MIN_PIECE:
                yield f"{path.relative_to(ROOT)}:{node.lineno}", piece


def test_messages_are_found() -> None:
    assert sum(1 for _ in messages()) > 50


@pytest.mark.parametrize(("where", "piece"), sorted(messages()))
def test_message_is_documented(where: str, piece: str) -> None:
    page = (DOCS / "troubleshooting.md").read_text()
    assert piece in page, (
        f"{where}: the error message containing {piece!r} is not in docs/troubleshooting.md; "
        "add it with its cause and fix"
    )
