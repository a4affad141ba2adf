"""The plugin guide's testing example (docs/plugin-guide.md quotes this file whole)."""

from llamaherd_pager.token import PagerToken

from llamaherd import hookimpl


def test_env_names_the_token():
    assert PagerToken().env({"token": "x"}, None) == {"PAGERDUTY_TOKEN": "x"}


class ExtraToken(PagerToken):
    name = "extra_token"


class Extra:
    """A plugin object that exists only in this test."""

    @hookimpl
    def register_credential_types(self, register):
        register(ExtraToken())


def test_with_an_extra_plugin(registered_plugin):
    reg = registered_plugin(Extra(), "extra")  # unregistered after the test
    assert reg.owner[("credential_types", "extra_token")] == "extra"


def test_validate_reports_a_missing_credential(offline_project):
    # An offline project: runs need no model API key (llamaherd's stand-ins where needed).
    offline_project.add_scripted_agent("a", 'credentials = ["pager_token"]\n')
    result = offline_project.al("validate")
    assert result.returncode == 2
    assert "al creds add pager_token" in result.stdout
