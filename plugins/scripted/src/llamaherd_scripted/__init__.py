"""llamaherd-scripted: Provider: deterministic and offline, for the demo and tests."""
