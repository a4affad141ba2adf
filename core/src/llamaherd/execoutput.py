"""The output of one ``Sandbox.exec``: streamed line by line as it arrives, kept bounded.

A runtime reading a command's raw output (a pipe, an ssh session) feeds the bytes here; each
complete line goes to the caller's ``on_output`` at once, and ``text`` is what the
``ExecResult`` carries: the first and the last ``MAX_OUTPUT / 2`` characters, with a note of
how many were left out between, so a command printing without end cannot fill the scheduler's
memory (the session cuts further for the model).
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable

MAX_OUTPUT = 8 * 1024 * 1024  # characters of an exec's output kept for its result


class ExecOutput:
    """Decodes output chunks (UTF-8, errors replaced) and hands complete lines (without the
    newline) to ``on_output``."""

    def __init__(self, on_output: Callable[[str], None] | None):
        self.on_output = on_output
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.head = ""
        self.tail: deque[str] = deque()
        self.tail_size = self.dropped = 0
        self.pending = ""

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self.decoder.decode(data, final)
        self._keep(text)
        if self.on_output is None:
            return
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        if final and self.pending:
            lines.append(self.pending)
            self.pending = ""
        for line in lines:
            self.on_output(line)

    def _keep(self, text: str) -> None:
        half = MAX_OUTPUT // 2
        room = half - len(self.head)
        self.head += text[:room]
        text = text[room:]
        if not text:
            return
        self.tail.append(text)
        self.tail_size += len(text)
        while self.tail_size > half:
            excess = self.tail_size - half
            first = self.tail.popleft()
            if len(first) > excess:
                self.tail.appendleft(first[excess:])
            cut = min(len(first), excess)
            self.tail_size -= cut
            self.dropped += cut

    @property
    def text(self) -> str:
        gap = f"\n[... {self.dropped} characters of output omitted ...]\n" if self.dropped else ""
        return self.head + gap + "".join(self.tail)
