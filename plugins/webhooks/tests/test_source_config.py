"""A [webhooks.<name>] table names its credential instance as `credential` or, Action Llama's
spelling, under the credential type's own name; `al validate` checks the one it names."""

from __future__ import annotations

import json

SECRET = "generic-secret"


def test_the_instance_named_under_the_type_verifies(webhook_server):
    server = webhook_server(
        '[webhooks.ci]\ntype = "generic"\nwebhook_secret = "ci"\n',
        {"deployer": '[[webhooks]]\nsource = "ci"\nevents = ["deploy"]\n'},
        {("webhook_secret", "ci"): {"secret": SECRET}},
    )
    response = server.send("ci", {"event": "deploy"}, secret=SECRET)
    assert response.status_code == 202 and response.json()["agents"] == ["deployer"]


def test_validate_checks_that_instance(tmp_project, al):
    tmp_project.config('[webhooks.ci]\ntype = "generic"\nwebhook_secret = "ci"\n')
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 2
    assert "config.toml: webhooks.ci: credential webhook_secret:ci not found" in result.stdout
    schema = json.loads(al("schema", "--project").stdout)
    variants = schema["properties"]["webhooks"]["additionalProperties"]["allOf"]
    generic = next(v for v in variants if v["if"]["properties"]["type"]["const"] == "generic")
    assert "webhook_secret" in generic["then"]["properties"]
