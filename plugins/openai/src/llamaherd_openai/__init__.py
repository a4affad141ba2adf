"""llamaherd-openai: Provider: OpenAI-compatible Chat Completions with tools, any base_url."""
