"""llamaherd-github: GitHub webhook source and the github_token, git_ssh and github_webhook_secret credential types."""
