"""Migration scripts, oldest first; each file is one Alembic revision."""
