"""llamaherd: run autonomous LLM agents on a schedule or on events.

Plugin authors need only ``hookimpl``::

    from llamaherd import hookimpl

    @hookimpl
    def register_credential_types(register):
        register(MyType())
"""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("llamaherd")

__all__ = ["hookimpl", "__version__"]
