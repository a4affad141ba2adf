"""llamaherd-dashboard: Web dashboard pages on the scheduler's HTTP server."""
