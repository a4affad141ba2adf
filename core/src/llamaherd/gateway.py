"""The gateway API: HTTP routes the in-sandbox commands call with their run's token."""

from __future__ import annotations

from llamaherd import hookimpl
