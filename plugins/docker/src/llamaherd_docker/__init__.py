"""llamaherd-docker: Runtime: Docker containers."""
