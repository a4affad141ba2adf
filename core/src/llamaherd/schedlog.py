"""The scheduler's log, ``.al/scheduler.log``: where its lines go, its two formats (``[log]
format``: "text" for people, "json" for a log shipper), and reading it back (``al logs``).

A scheduler always writes the file, in the foreground too, so ``al logs`` shows it whichever
way it was started; in the foreground the same lines also go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from logging.handlers import RotatingFileHandler, WatchedFileHandler
from pathlib import Path
from typing import Any

LOG_FILE = "scheduler.log"
FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
DEFAULTS = {"format": "text", "level": "info"}
# Rotation: at 10 MiB, 5 old files kept (60 MiB at most); maxBytes = 0 leaves it to logrotate.
ROTATION = {"maxBytes": 10 * 1024 * 1024, "backups": 5}
# ``%(asctime)s``: "2026-12-03 22:03:51,123", local time.
_TEXT_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3}) ")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO, UTC), at (epoch), level, logger, message
    [, project, exception]."""

    def __init__(self, project_name: str | None = None):
        super().__init__()
        self.project_name = project_name

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created).astimezone().isoformat(),
            "at": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.project_name:
            entry["project"] = self.project_name
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``[log]`` of the project config with its defaults; ``AL_LOG_LEVEL`` / ``AL_LOG_FORMAT``
    win (the schema has checked the table's values)."""
    table = config.get("log") if isinstance(config.get("log"), dict) else {}
    found = {**DEFAULTS, **ROTATION, **table}
    for key in DEFAULTS:
        found[key] = os.environ.get(f"AL_LOG_{key.upper()}", found[key]).lower()
    return found


def _formatter(log_format: str, project_name: str | None) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(project_name)
    prefix = f"[{project_name}] ".replace("%", "%%") if project_name else ""
    return logging.Formatter(f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s")


class _Private:
    """A log file handler whose files (rotated ones too) are created 0600: the log names runs
    and webhook senders."""

    baseFilename: str
    mode: str
    encoding: str | None
    errors: str | None

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
        return os.fdopen(fd, self.mode, encoding=self.encoding, errors=self.errors)


class RotatingLog(_Private, RotatingFileHandler):
    """``.al/scheduler.log`` rotated by size (``scheduler.log.1`` ... ``.N``). In a detached
    scheduler, whose stdout and stderr are the log file (a stray print, a crash's
    traceback), those follow the rotation to the new file."""

    def __init__(self, path: Path, max_bytes: int, backups: int, *, follow_std: bool):
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.follow_std = follow_std

    def doRollover(self) -> None:  # noqa: N802 (logging's name)
        super().doRollover()
        if self.follow_std and self.stream is not None:
            for fd in (1, 2):
                os.dup2(self.stream.fileno(), fd)


class WatchedLog(_Private, WatchedFileHandler):
    """``.al/scheduler.log`` reopened when something else (logrotate) moved it away."""


def _file_handler(path: Path, found: dict[str, Any], follow_std: bool) -> logging.Handler:
    """``[log] maxBytes`` > 0: rotated here, keeping ``[log] backups`` files; 0: left to an
    external rotation such as logrotate (the file is reopened once it is moved)."""
    max_bytes = int(found["maxBytes"])
    if max_bytes <= 0:
        return WatchedLog(path, encoding="utf-8")
    return RotatingLog(path, max_bytes, int(found["backups"]), follow_std=follow_std)


def configure(project: Any, *, to_stderr: bool) -> Path:
    """Send the scheduler's log lines to ``.al/scheduler.log`` (created 0600: it names runs and
    webhook senders; rotated as ``[log]`` says) and, with ``to_stderr``, to stderr too; the
    file's path. Without ``to_stderr`` (a detached scheduler) stdout and stderr are the file."""
    found = settings(project.config)
    if found["format"] not in FORMATS:
        found["format"] = "text"
    path = project.state_dir / LOG_FILE
    project.state_dir.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)  # one an older version created world-readable
    name = project.name if project.name != project.root.name else None
    handlers: list[logging.Handler] = [_file_handler(path, found, follow_std=not to_stderr)]
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(_formatter(found["format"], name))
    logging.basicConfig(level=found["level"].upper(), handlers=handlers, force=True)
    return path


# ---------------------------------------------------------------------- reading it back
@dataclass
class Entry:
    """One log entry: its first line and what followed it (a traceback), and when."""

    at: float | None
    text: str

    def json_line(self) -> str:
        """The entry as one JSON line: a JSON-format line as written, a text line wrapped."""
        if _as_json(self.text) is not None:
            return self.text
        return json.dumps({"at": self.at, "line": self.text})

    def view(self) -> str:
        """The entry for a person; a JSON line reads like a text one."""
        data = _as_json(self.text)
        if data is None:
            return self.text
        stamp = datetime.fromtimestamp(data.get("at") or 0).strftime("%Y-%m-%d %H:%M:%S")
        line = f"{stamp} {str(data.get('level', '')).upper()} {data.get('logger', '')}: "
        line += str(data.get("message", ""))
        return line + (f"\n{data['exception']}" if data.get("exception") else "")


def _as_json(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "message" in data else None


def _stamp(line: str) -> float | None:
    """When a line was written, if it starts an entry (either format); else None."""
    match = _TEXT_STAMP.match(line)
    if match:
        parsed = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        return parsed.timestamp() + int(match.group(2)) / 1000
    data = _as_json(line)
    return float(data["at"]) if data and isinstance(data.get("at"), int | float) else None


def entries(lines: Iterable[str]) -> Iterator[Entry]:
    """The entries of the log's lines: a line without a time (a traceback, a stray print of
    the scheduler process) belongs to the entry before it."""
    current: Entry | None = None
    for line in lines:
        at = _stamp(line)
        if at is None and current is not None:
            current.text += "\n" + line
            continue
        if current is not None:
            yield current
        current = Entry(at, line)
    if current is not None:
        yield current
