"""The plugin guide's testing example is a real file, run in CI (tox -e plugin-pager): the guide
quotes it whole, so it cannot drift from what runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "contrib/pager/tests/test_pager.py"


def test_the_guide_quotes_the_example_test_file_whole():
    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    intro = f"`{EXAMPLE}`, whole:\n\n```python\n"
    assert intro in guide, f"docs/plugin-guide.md no longer quotes {EXAMPLE}"
    quoted = guide.split(intro, 1)[1].split("\n```", 1)[0]
    assert quoted == (ROOT / EXAMPLE).read_text().rstrip()


def test_ci_runs_the_example_plugins_installed_alone():
    tox = (ROOT / "tox.ini").read_text()
    env_list = tox.split("env_list =", 1)[1].splitlines()[0]
    assert {"plugin-pager", "plugin-example-trigger", "lint"} <= {
        name.strip() for name in env_list.split(",")
    }
