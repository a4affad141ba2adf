"""End-to-end fixtures over :mod:`llamaherd.testing`: a real project on disk with an isolated
credential store, `al` subprocesses, a scheduler process and a fake model server speaking the
OpenAI Chat Completions wire format on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import ModelServer, OfflineProject


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    from llamaherd.plugins import registry

    needed = {"providers": ("scripted", "openai"), "runtimes": ("host-user",)}
    for kind, names in needed.items():
        missing = [name for name in names if name not in getattr(registry(), kind)]
        if missing:
            pytest.skip(f"end-to-end tests need the {', '.join(missing)} plugins")
    return OfflineProject(
        tmp_path / "proj",
        env={"AL_RETRY_BASE_DELAY": "0.01"},
        creds=tmp_path / "creds",
        timeout=60,
    )


@pytest.fixture
def fake_model(
    model_server: ModelServer,
) -> Callable[[list[tuple[int, dict[str, Any]]]], ModelServer]:
    """``fake_model([(status, body), ...])``: the model server answering those in turn, then
    repeating the last; a 429 comes with ``retry-after: 0``."""

    def start(replies: list[tuple[int, dict[str, Any]]]) -> ModelServer:
        model_server.repeat_last = True
        for status, body in replies:
            model_server.reply(status, body, {"retry-after": "0"} if status == 429 else None)
        return model_server

    return start
