"""The event log (what each session's streams carried, for replay) and the live bus."""
