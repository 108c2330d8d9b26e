"""import_and_deploy: from a repository URL to a live app (runtime detection, the steps)."""
