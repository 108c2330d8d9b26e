"""The ``instructions`` of the initialize result (MCP 2025-11-25 ``InitializeResult``): what an
agent should know before its first call. Short on purpose: clients may put it in the model's
system prompt on every turn, and the tools' own descriptions carry the details."""

from __future__ import annotations

INSTRUCTIONS = (
    "AppDeck deploys and runs apps for you. Call whats_next first: it reads where your apps "
    "stand and names the next call to make.\n"
    "Sources come from one of: a path under your tenant's source root, a git repository "
    "(connect_repo, or import_and_deploy), inline files (import_and_deploy), or a git push to "
    "the app's hosted remote (/git/<tenant>/<app>.git, your AppDeck token as the password).\n"
    "Deploys (deploy_app, import_and_deploy) run as tasks: ask for a task and follow its "
    "status and progress notifications (tasks/get, tasks/result) instead of waiting on the "
    "call.\n"
    "Destructive actions (deleting an app, dropping a table, a destructive schema change) ask "
    "for confirmation: answer the elicitation, or call again with confirm: true once the user "
    "agreed."
)
