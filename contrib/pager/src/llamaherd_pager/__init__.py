"""llamaherd-pager: adds the ``pager_token`` credential type.

llamaherd finds this module through the ``llamaherd`` entry-point group (see pyproject.toml) and
calls the hook below. Keep this module light: ``al`` imports it on every start.
"""

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register):
    from llamaherd_pager.token import PagerToken

    register(PagerToken())
