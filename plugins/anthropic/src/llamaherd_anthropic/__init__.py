"""llamaherd-anthropic: Provider: Anthropic Messages API with tools."""
