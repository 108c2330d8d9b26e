"""Tests of appdeck.storage, run on SQLite and PostgreSQL."""
