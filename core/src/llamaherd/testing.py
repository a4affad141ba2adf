"""pytest plugin with fixtures for llamaherd's tests and for third-party plugin authors.

Enable with ``-p llamaherd.testing``.
"""

from __future__ import annotations
