"""llamaherd: run autonomous LLM agents on a schedule or on events.

Plugin authors need only ``hookimpl``::

    from llamaherd import hookimpl

    @hookimpl
    def register_credential_types(register):
        register(MyType())
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["hookimpl", "__version__"]


def __getattr__(name: str) -> Any:
    """``hookimpl``, made on first use: the read commands (``al stat``) never load pluggy."""
    if name != "hookimpl":
        raise AttributeError(f"module 'llamaherd' has no attribute {name!r}")
    import pluggy

    marker = globals()["hookimpl"] = pluggy.HookimplMarker("llamaherd")
    return marker
