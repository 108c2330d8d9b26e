"""The console (issue 24): what the humans behind the agents see, in a browser, at ``/console``.

Server-rendered HTML (Jinja2, autoescaped) over the platform's services: every page asks the
same services the MCP tools ask, as the signed-in user, so the roles of ``DESIGN.md`` decide
what a page shows and another tenant's app is a 404. Live parts ride the change feed through
the replicas' broadcast (:mod:`appdeck.console.live`); one small script of our own
(``static/console.js``) follows them, and every page reads complete without it.

Sign-in is the authorization server's own check (:mod:`appdeck.auth.server.signin`: the same
users, passwords, throttles and activity lines); a signed-in browser holds a server-side
console session (:mod:`appdeck.storage.console_sessions`) in an HttpOnly cookie, and every
form carries the session's CSRF token.
"""

from appdeck.console.routes import console_app, console_routes

__all__ = ["console_app", "console_routes"]
