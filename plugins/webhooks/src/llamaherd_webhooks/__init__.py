"""llamaherd-webhooks: Trigger: HTTP webhooks with a generic HMAC source and wait matching."""
