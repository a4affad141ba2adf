"""Optional modules a scheduler keeps out of its process.

Some libraries import every optional module they find as they are imported, whether the
process will use it or not:

- peewee, every database driver: psycopg2 brings libpq, its own OpenSSL and Kerberos libraries
  (about 5 MiB resident and a tenth of a scheduler's start), and each driver that is not
  installed costs a search of every ``sys.path`` folder. A scheduler whose database is SQLite
  never needs them.
- requests (the model providers, the docker SDK), a character-set detector (2.6 MiB resident),
  used only to decode a text body that names no charset; every API a scheduler calls answers
  JSON, which requests decodes without it.

``scheduler_only`` keeps them unloaded for the life of the process: an import of one fails at
once, as if it were not installed (PostgreSQL is then unavailable in that process).
"""

from __future__ import annotations

import sys
import warnings

# The modules peewee tries at import (PostgreSQL and MySQL drivers).
OTHER_DRIVERS = ("psycopg2cffi", "psycopg2", "psycopg", "pymysql", "MySQLdb")
# What requests tries for ``Response.apparent_encoding``.
CHARSET_DETECTORS = ("chardet", "charset_normalizer")


def scheduler_only(sqlite: bool) -> list[str]:
    """Keep the modules above out of this process (the drivers only when its database is
    ``sqlite``), those that nothing loaded yet; which were kept out."""
    names = [*CHARSET_DETECTORS, *(OTHER_DRIVERS if sqlite else ())]
    kept = [name for name in names if name not in sys.modules]
    if sqlite and "peewee" in sys.modules:  # too late: it took what it found
        kept = [name for name in kept if name not in OTHER_DRIVERS]
    for name in kept:
        sys.modules[name] = None  # type: ignore[assignment]
    if "chardet" in kept:
        # requests says at import that it found no detector; kept out on purpose, it decodes
        # a body that names no charset as UTF-8 (and JSON as JSON), so the warning is noise in
        # every scheduler's log.
        warnings.filterwarnings(
            "ignore", "Unable to find acceptable character detection", module="requests"
        )
    return kept
