"""llamaherd-host-user: Runtime: processes under a separate OS user."""
