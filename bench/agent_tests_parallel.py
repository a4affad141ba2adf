"""`al test -n 4` against `al test` (one case at a time) over 20 cases, each a real host-user
sandbox (a pre hook, two bash turns, a return value) replayed from its cassette.

The cases are recorded once (`al test --update`: the scripted model is offline), then each
round runs both ways, alternating, as a user does (`al` processes, wall time from start to
exit). The figure is the median over the rounds of the parallel time as a share of the serial.

Usage: python bench/agent_tests_parallel.py [ROUNDS]   (default 3). Aim (issue 41): ≤ 60 %
on 2 cores.
"""

from __future__ import annotations

import getpass
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = 20
SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "ls && cat notes.txt" } }]
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "grep -c line notes.txt; date -u +%Y > year.txt" } }]
[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = { counted = true } } }]
[[turns]]
text = "Counted."
"""
CASE = """
[trigger]
kind = "manual"
prompt = "count the lines ({n})"

[expect]
state = "done"
return = {{ counted = true }}
max_turns = 4

[[expect.commands]]
command = {{ glob = "seq 1 50*" }}
phase = "pre"
"""


def make_project(root: Path) -> None:
    (root / "agents" / "counter" / "tests").mkdir(parents=True)
    (root / "config.toml").write_text(
        '[models.scripted]\nprovider = "scripted"\nmodel = "scripted"\n\n[gateway]\nport = 0\n'
    )
    agent = root / "agents" / "counter"
    (agent / "SKILL.md").write_text("---\nname: counter\n---\nCount the lines of notes.txt.\n")
    (agent / "config.toml").write_text(
        'models = ["scripted"]\n'
        f'runtime = {{ type = "host-user", run_as = "{getpass.getuser()}" }}\n\n'
        '[hooks]\npre = ["seq 1 50 | sed s/^/line/ > notes.txt"]\n'
    )
    (agent / "script.toml").write_text(SCRIPT)
    for n in range(CASES):
        (agent / "tests" / f"case-{n:02}.toml").write_text(CASE.format(n=n))


def al_test(root: Path, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(root), "test", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"al test {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return elapsed


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        make_project(root)
        al_test(root, "--update")  # record the 20 cassettes
        serial, parallel = [], []
        for _ in range(rounds):
            serial.append(al_test(root))
            parallel.append(al_test(root, "-n", "4"))
            print(
                f"round: -n 1 {serial[-1]:.2f} s, -n 4 {parallel[-1]:.2f} s (load {os.getloadavg()[0]:.1f})"
            )
    shares = [p / s for p, s in zip(parallel, serial, strict=True)]
    print(
        f"al test over {CASES} cases on {os.cpu_count()} cores: -n 1 {statistics.median(serial):.2f} s, "
        f"-n 4 {statistics.median(parallel):.2f} s: {statistics.median(shares):.0%} of serial "
        f"(median of {rounds} rounds; aim <= 60%)"
    )


if __name__ == "__main__":
    main()
