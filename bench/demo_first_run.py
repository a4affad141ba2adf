"""The README's first command on a machine that has never run it: wall time from
``python3 -m pip install tox-uv && tox -e demo`` to the demo's last line.

"Never run it" is made here, not found: a fresh clone of this checkout, a new virtual
environment for pip to install tox-uv into (as a fresh machine's Python has no tox), and empty
pip and uv caches, so every package comes from the registry as it would there.

Usage: python bench/demo_first_run.py [RUNS]   (default 1). Aim (issue 34): < 20 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once() -> tuple[float, float, str]:
    """Seconds for the pip step and for ``tox -e demo``, and the demo's last line."""
    with tempfile.TemporaryDirectory(prefix="al-demo-bench-") as scratch:
        home = Path(scratch)
        checkout = home / "llamaherd"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(home / "python")], check=True)
        bin_dir = home / "python" / "bin"
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PIP_CACHE_DIR": str(home / "pip-cache"),
            "UV_CACHE_DIR": str(home / "uv-cache"),
            "XDG_CACHE_HOME": str(home / "cache"),
        }
        env.pop("VIRTUAL_ENV", None)
        start = time.perf_counter()
        pip = ["python3", "-m", "pip", "install", "-q", "tox-uv"]
        subprocess.run(pip, cwd=checkout, env=env, check=True)
        installed = time.perf_counter()
        demo = subprocess.run(
            ["tox", "-e", "demo"], cwd=checkout, env=env, check=True, capture_output=True, text=True
        )
        done = time.perf_counter()
        last = [line for line in demo.stdout.splitlines() if line.strip()][-1]
        return installed - start, done - installed, last


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    samples = [once() for _ in range(runs)]
    for pip, demo, last in samples:
        print(f"pip install tox-uv {pip:.1f} s, tox -e demo {demo:.1f} s (last line: {last})")
    load = os.getloadavg()[0]
    total = statistics.median(pip + demo for pip, demo, _ in samples)
    print(f"README first command to the demo's output (median of {runs}, load {load:.1f}): "
          f"{total:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
