"""Runs per minute of the same project across commits: did a change make runs slower?

Each commit is checked out (``git worktree``, detached) with its own virtual environment
(``uv``: the commit's ``requirements.txt``, so its own plugins and dependencies), under
``--cache`` so a second run reuses both. Then ``bench/compare/sustained.py``'s round, with that
commit's ``al``: ``--deliveries`` signed GitHub ``issues`` deliveries from ``--senders``
concurrent senders to one agent with room for ``--scale`` runs, each run one model turn
answered at once by a fake model server on 127.0.0.1, the agent run as the OS user
``al-agent`` (``al setup host-user``). Rounds interleave the commits (the first alternates), so
a change of machine load hits each alike; the figure is the median.

    python bench/runs_across_commits.py [COMMIT ...]   # default: HEAD and HEAD two days back
        [--deliveries 1000] [--senders 8] [--scale 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "compare"))

from common import interleaved, load  # noqa: E402
from first_request import FakeModel  # noqa: E402
from sustained import runs_per_minute  # noqa: E402

REPO = HERE.parent
CACHE = Path("/tmp/llamaherd-commits")  # readable by al-agent, as the sandbox's code must be


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def two_days_back() -> str:
    """The newest commit of HEAD's history made at least two days before HEAD."""
    head = int(git("log", "-1", "--format=%ct", "HEAD"))
    return git("rev-list", "-1", f"--before={head - 2 * 86400}", "HEAD")


def checkout(commit: str, cache: Path) -> Path:
    """The ``al`` of ``commit``: its tree and virtual environment under ``cache``, made once."""
    sha = git("rev-parse", commit)
    tree = cache / sha[:12]
    al = tree / ".venv" / "bin" / "al"
    if al.exists():
        return al
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o755)
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    subprocess.run(["uv", "venv", "-q", "--seed", str(tree / ".venv")], check=True)
    python = str(tree / ".venv" / "bin" / "python")
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", python, "-r", "requirements.txt"],
        cwd=tree,
        check=True,
    )
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(tree)], check=True)
    return al


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("commits", nargs="*")
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args()
    commits = args.commits or ["HEAD", two_days_back()]
    bins = {commit: checkout(commit, args.cache) for commit in commits}
    model = FakeModel()
    threading.Thread(target=model.serve_forever, daemon=True).start()

    def measure(commit: str) -> float:
        env = {"AL_OURS_BIN": str(bins[commit])}
        rate = runs_per_minute("ours", model, args.deliveries, args.senders, args.scale, env)
        print(f"{commit}: {rate:,.0f} runs/min ({load()})", flush=True)
        return rate

    found = interleaved(args.rounds, measure, commits)
    base = statistics.median(found[commits[-1]])
    for commit in commits:
        median = statistics.median(found[commit])
        subject = git("log", "-1", "--format=%h %cs %s", commit)[:72]
        print(f"{subject}: {median:,.0f} runs/min, {median / base:.2f}× the last commit's")


if __name__ == "__main__":
    main()
