"""Repos: an app's git repository (connect_repo), its push webhook, and checkouts at a commit
as a deployment's source (see :mod:`.service`)."""
