"""`al stats`: per-agent tables (runs, success rate, durations, tokens, cost from the
configured price) and the call graph, over real runs of the scripted provider."""

from __future__ import annotations

import json
import re

PRICE = {"input": 2.0, "output": 10.0}  # USD per million tokens, set in [models.scripted]


def _priced(project) -> None:
    config = project.root / "config.toml"
    text = config.read_text().replace(
        'model = "scripted"\n',
        f'model = "scripted"\npricing = {{ input = {PRICE["input"]}, output = {PRICE["output"]} }}\n',
        1,
    )
    config.write_text(text)


def test_stats_tables_cost_success_rate_and_call_graph(project):
    _priced(project)
    project.add_scripted_agent("callee", script='[[turns]]\ntext = "called"\n')
    project.add_scripted_agent(
        "caller",
        script='[[turns]]\ntool_calls = [{name = "call_agent", arguments = '
        '{agent = "callee", context = "go"}}]\n[[turns]]\ntext = "done"\n',
    )
    project.add_scripted_agent(
        "flaky", config='[hooks]\npre = ["exit 4"]\n', script='[[turns]]\ntext = "x"\n'
    )
    for agent in ("caller", "caller", "flaky"):
        project.al("run", agent)

    data = json.loads(project.al("stats", "--json", check=True).stdout)
    store = project.store()
    for name in ("caller", "flaky"):
        runs = store.runs(agent=name)
        row = data["agents"][name]
        assert row["runs"] == len(runs)
        tokens = sum(
            r.input_tokens * PRICE["input"] + r.output_tokens * PRICE["output"] for r in runs
        )
        assert abs(row["cost"]["usd"] - tokens / 1e6) < 1e-6 and row["cost"]["unpriced_calls"] == 0
    assert data["calls"] == [{"caller": "caller", "target": "callee", "count": 2}]

    table = project.al("stats", "--since", "1h", check=True).stdout
    caller = next(line.split() for line in table.splitlines() if line.split()[:1] == ["caller"])
    assert caller[1:3] == [str(data["agents"]["caller"]["runs"]), "100%"]
    assert caller[-1] == f"${data['agents']['caller']['cost']['usd']:.4f}"
    flaky = next(line.split() for line in table.splitlines() if line.split()[:1] == ["flaky"])
    assert flaky[2] == "0%"
    assert re.search(r"caller\s+→\s+callee\s+2", table)
    assert re.search(r"all agents\s+\d+", table)  # the totals

    later = project.al("stats", "--since", "2999-01-01", check=True).stdout
    assert "caller" not in later and "none" in later
    bad = project.al("stats", "--since", "a while")
    assert bad.returncode == 2 and "--since" in bad.stderr
