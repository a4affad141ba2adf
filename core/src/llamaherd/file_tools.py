"""The file tools of Action Llama's default harness: ``read``, ``write``, ``edit``, ``grep``,
``find``, ``ls``, with its argument names, behaviour and messages.

Everything happens in the run's sandbox, never on the scheduler's filesystem: ``read`` and
``edit`` read with ``get_file``, ``write`` and ``edit`` write with ``put_file``, and ``grep``,
``find`` and ``ls`` run the ``al-files`` command there (``sandbox_bin``). Relative paths are
from the session's working directory. Each handler takes the session and the call's arguments
and returns (text, exit code); a failure raises LlamaherdError with the harness's message.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import unicodedata
from typing import Any

from llamaherd.errors import LlamaherdError
from llamaherd.types import ToolSpec

MAX_LINES = 2000
MAX_BYTES = 30_000  # under the session's cap on a tool result, so the notices survive it
IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF")


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _number(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


def _tool(name: str, description: str, required: list[str], **properties: Any) -> ToolSpec:
    return ToolSpec(
        name, description, {"type": "object", "properties": properties, "required": required}
    )


FILE_TOOLS = [
    _tool(
        "read",
        f"Read the contents of a file. Output is truncated to {MAX_LINES} lines or "
        f"{MAX_BYTES // 1000}KB (whichever is hit first). Use offset/limit for large files. "
        "When you need the full file, continue with offset until complete.",
        ["path"],
        path=_string("Path to the file to read (relative or absolute)"),
        offset=_number("Line number to start reading from (1-indexed)"),
        limit=_number("Maximum number of lines to read"),
    ),
    _tool(
        "write",
        "Write content to a file. Creates the file if it doesn't exist, overwrites if it "
        "does. Automatically creates parent directories.",
        ["path", "content"],
        path=_string("Path to the file to write (relative or absolute)"),
        content=_string("Content to write to the file"),
    ),
    _tool(
        "edit",
        "Edit a single file using exact text replacement. Every edits[].oldText must match a "
        "unique, non-overlapping region of the original file. If two changes affect the same "
        "block or nearby lines, merge them into one edit instead of emitting overlapping edits.",
        ["path", "edits"],
        path=_string("Path to the file to edit (relative or absolute)"),
        edits={
            "type": "array",
            "description": "One or more targeted replacements, each matched against the "
            "original file.",
            "items": {
                "type": "object",
                "properties": {
                    "oldText": _string("Exact text for one targeted replacement; unique."),
                    "newText": _string("Replacement text for this targeted edit."),
                },
                "required": ["oldText", "newText"],
            },
        },
    ),
    _tool(
        "grep",
        "Search file contents for a pattern. Returns matching lines with file paths and line "
        "numbers. Respects .gitignore. Output is truncated to 100 matches or "
        f"{MAX_BYTES // 1000}KB. Long lines are truncated to 500 chars.",
        ["pattern"],
        pattern=_string("Search pattern (regex or literal string)"),
        path=_string("Directory or file to search (default: current directory)"),
        glob=_string("Filter files by glob pattern, e.g. '*.ts' or '**/*.spec.ts'"),
        ignoreCase={"type": "boolean", "description": "Case-insensitive search"},
        literal={"type": "boolean", "description": "Treat pattern as a literal string"},
        context=_number("Number of lines to show before and after each match (default: 0)"),
        limit=_number("Maximum number of matches to return (default: 100)"),
    ),
    _tool(
        "find",
        "Search for files by glob pattern. Returns matching file paths relative to the search "
        f"directory. Respects .gitignore. Output is truncated to 1000 results or "
        f"{MAX_BYTES // 1000}KB.",
        ["pattern"],
        pattern=_string("Glob pattern to match files, e.g. '*.ts', '**/*.json'"),
        path=_string("Directory to search in (default: current directory)"),
        limit=_number("Maximum number of results (default: 1000)"),
    ),
    _tool(
        "ls",
        "List directory contents. Returns entries sorted alphabetically, with '/' suffix for "
        "directories. Includes dotfiles. Output is truncated to 500 entries.",
        [],
        path=_string("Directory to list (default: current directory)"),
        limit=_number("Maximum number of entries to return (default: 500)"),
    ),
]


def resolve(session: Any, path: Any) -> str:
    """``path`` (``@``-prefixed or not) from the session's working directory."""
    if not isinstance(path, str) or not path:
        raise LlamaherdError("path: expected a file path")
    return posixpath.normpath(posixpath.join(session.cwd, path.removeprefix("@")))


# ------------------------------------------------------------------------------ read / write


def read(session: Any, args: dict[str, Any]) -> tuple[str, int]:
    path = resolve(session, args.get("path"))
    data = session.ctx.sandbox.get_file(path)
    if data.startswith(IMAGE_MAGIC):
        return f"[image file, {len(data)} bytes: images are not shown to the model here]", 0
    lines = data.decode("utf-8", "replace").split("\n")
    offset, limit = _positive(args.get("offset")), _positive(args.get("limit"))
    start = max(0, offset - 1) if offset else 0
    if start >= len(lines):
        raise LlamaherdError(f"Offset {offset} is beyond end of file ({len(lines)} lines total)")
    end = min(start + limit, len(lines)) if limit else len(lines)
    shown, by = _head(lines[start:end])
    last = start + len(shown)
    text = "\n".join(shown)
    if by:
        size = f" ({MAX_BYTES // 1000}KB limit)" if by == "bytes" else ""
        text += (
            f"\n\n[Showing lines {start + 1}-{last} of {len(lines)}{size}. "
            f"Use offset={last + 1} to continue.]"
        )
    elif limit and end < len(lines):
        text += f"\n\n[{len(lines) - end} more lines in file. Use offset={end + 1} to continue.]"
    return text, 0


def _positive(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def _head(lines: list[str]) -> tuple[list[str], str | None]:
    """The first lines within MAX_LINES and MAX_BYTES, and which limit cut them (or None)."""
    size = 0
    for count, line in enumerate(lines):
        if count >= MAX_LINES:
            return lines[:count], "lines"
        size += len(line.encode("utf-8", "replace")) + 1
        if size > MAX_BYTES:
            return lines[: max(count, 1)], "bytes"
    return lines, None


def write(session: Any, args: dict[str, Any]) -> tuple[str, int]:
    path = resolve(session, args.get("path"))
    content = args.get("content")
    if not isinstance(content, str):
        raise LlamaherdError("content: expected a string")
    _put(session, path, content.encode())
    return f"Successfully wrote {len(content)} bytes to {args['path']}", 0


def _put(session: Any, path: str, data: bytes) -> None:
    parent = posixpath.dirname(path)
    made = session.ctx.sandbox.exec(f"mkdir -p -- {shlex.quote(parent)}", timeout=30)
    if made.exit_code != 0:
        raise LlamaherdError(f"cannot create {parent}: {made.output.strip()}")
    session.ctx.sandbox.put_file(path, data)


# ------------------------------------------------------------------------------ edit


def edit(session: Any, args: dict[str, Any]) -> tuple[str, int]:
    """Exact replacements, each unique in the original file (then with trailing spaces,
    quotes, dashes and special spaces normalised, as the harness's fuzzy match does)."""
    edits = list(args.get("edits") or [])
    if isinstance(args.get("oldText"), str) and isinstance(args.get("newText"), str):
        edits.append({"oldText": args["oldText"], "newText": args["newText"]})  # older form
    if not edits or not all(
        isinstance(e, dict)
        and isinstance(e.get("oldText"), str)
        and isinstance(e.get("newText"), str)
        for e in edits
    ):
        raise LlamaherdError(
            "Edit tool input is invalid. edits must contain at least one replacement."
        )
    shown = args.get("path")
    path = resolve(session, shown)
    try:
        raw = session.ctx.sandbox.get_file(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise LlamaherdError(f"File not found: {shown}") from None
    bom = "\ufeff" if raw.startswith("\ufeff") else ""
    content = raw.removeprefix("\ufeff")
    crlf = "\r\n" in content
    changed = apply_edits(content.replace("\r\n", "\n"), edits, str(shown))
    if crlf:
        changed = changed.replace("\n", "\r\n")
    _put(session, path, (bom + changed).encode())
    return f"Successfully replaced {len(edits)} block(s) in {shown}.", 0


def fuzzy(text: str) -> str:
    """The harness's fuzzy form: NFKC, no trailing spaces, ASCII quotes, dashes and spaces."""
    text = "\n".join(line.rstrip() for line in unicodedata.normalize("NFKC", text).split("\n"))
    text = re.sub("[\u2018\u2019\u201a\u201b]", "'", text)
    text = re.sub("[\u201c\u201d\u201e\u201f]", '"', text)
    text = re.sub("[\u2010-\u2015\u2212]", "-", text)
    return re.sub("[\u00a0\u2002-\u200a\u202f\u205f\u3000]", " ", text)


def apply_edits(content: str, edits: list[dict[str, str]], path: str) -> str:
    """``content`` with every edit applied (all matched against the original)."""
    pairs = [
        (e["oldText"].replace("\r\n", "\n"), e["newText"].replace("\r\n", "\n")) for e in edits
    ]
    many = len(pairs) > 1
    for i, (old, _) in enumerate(pairs):
        if not old:
            which = f"edits[{i}].oldText" if many else "oldText"
            raise LlamaherdError(f"{which} must not be empty in {path}.")
    exact = all(old in content for old, _ in pairs)
    base = content if exact else fuzzy(content)
    spans = []
    for i, (old, new) in enumerate(pairs):
        needle = old if exact else fuzzy(old)
        index = base.find(needle)
        if index < 0:
            raise LlamaherdError(
                f"Could not find edits[{i}] in {path}. The oldText must match exactly including "
                "all whitespace and newlines."
                if many
                else f"Could not find the exact text in {path}. The old text must match "
                "exactly including all whitespace and newlines."
            )
        count = base.count(needle)
        if count > 1:
            raise LlamaherdError(
                f"Found {count} occurrences of edits[{i}] in {path}. Each oldText must be "
                "unique. Please provide more context to make it unique."
                if many
                else f"Found {count} occurrences of the text in {path}. The text must be unique. "
                "Please provide more context to make it unique."
            )
        spans.append((index, index + len(needle), new, i))
    spans.sort()
    for (_, end, _, first), (start, _, _, second) in zip(spans, spans[1:], strict=False):
        if end > start:
            raise LlamaherdError(
                f"edits[{first}] and edits[{second}] overlap in {path}. Merge them into one "
                "edit or target disjoint regions."
            )
    changed = base
    for start, end, new, _ in reversed(spans):
        changed = changed[:start] + new + changed[end:]
    if changed == base:
        raise LlamaherdError(
            f"No changes made to {path}. The replacements produced identical content."
            if many
            else f"No changes made to {path}. The replacement produced identical content."
        )
    return changed


# ------------------------------------------------------------------------------ grep find ls


def _listing(tool: str) -> Any:
    """A handler running ``al-files <tool>`` in the sandbox, in the working directory."""

    def run(session: Any, args: dict[str, Any]) -> tuple[str, int]:
        if tool != "ls" and not isinstance(args.get("pattern"), str):
            raise LlamaherdError("pattern: expected a string")
        arguments = dict(args)
        if isinstance(arguments.get("path"), str):
            arguments["path"] = resolve(session, arguments["path"])
        result = session.ctx.sandbox.exec(
            f"al-files {tool} {shlex.quote(json.dumps(arguments))}",
            cwd=session.cwd,
            env=dict(session.env),
            timeout=60,
        )
        text = result.output.rstrip("\n")
        if result.exit_code != 0:
            raise LlamaherdError(text or f"{tool} failed (exit {result.exit_code})")
        return text, 0

    return run


FILE_HANDLERS = {
    "read": read,
    "write": write,
    "edit": edit,
    "grep": _listing("grep"),
    "find": _listing("find"),
    "ls": _listing("ls"),
}
