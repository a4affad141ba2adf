"""The README's demo: create a project, validate it and run its example agent for real.

Offline and keyless: SQLite store, host-user runtime as the current user, scripted provider.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def al(*args: str, cwd: Path) -> None:
    print(f"$ al {' '.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "llamaherd", *args], cwd=cwd)
    if code != 0:
        sys.exit(code)


def main() -> None:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="llamaherd-demo-"))
    project = workdir / "demo"
    al("new", str(project), cwd=workdir)
    al("validate", cwd=project)
    al("run", "hello", cwd=project)
    al("runs", cwd=project)
    print(f"demo finished in {time.monotonic() - started:.1f}s (project: {project})")


if __name__ == "__main__":
    main()
