"""CI: an app's test command run at each pushed commit, in the app's build sandbox (manage_ci)."""
