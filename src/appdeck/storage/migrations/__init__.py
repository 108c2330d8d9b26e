"""Alembic migrations of the AppDeck database (run them with :func:`appdeck.storage.migrate`)."""
