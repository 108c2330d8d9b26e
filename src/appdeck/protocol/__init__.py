"""The MCP protocol core: JSON-RPC dispatch, lifecycle, sessions, tasks, subscriptions.

It takes plain dicts and returns plain dicts; it never imports a web framework, a database
driver or Redis. Storage and delivery are reached only through the interfaces in
:mod:`appdeck.protocol.ports`.
"""
