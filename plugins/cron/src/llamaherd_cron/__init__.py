"""llamaherd-cron: Trigger: cron expressions and intervals."""
