"""whats_next: the next steps for an app, derived from its state (docs/whats-next.md)."""
