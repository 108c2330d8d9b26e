"""Discovery documents: authorization server metadata (RFC 8414), protected resource metadata
(RFC 9728) and the signing keys (JWKS).

OpenID Connect discovery (``/.well-known/openid-configuration``) is not served: AppDeck
issues no ID tokens, and a client that finds that document may expect them. MCP clients try
RFC 8414 first (MCP 2025-11-25, "Authorization Server Metadata Discovery").
"""

from __future__ import annotations

from typing import Any, Final

from appdeck.auth.scopes import SCOPES

AUTH_METHODS: Final = ["none", "client_secret_basic", "client_secret_post"]
CACHE: Final = "public, max-age=300"


def authorization_server(issuer: str) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "registration_endpoint": f"{issuer}/register",
        "revocation_endpoint": f"{issuer}/revoke",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "scopes_supported": list(SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }


def protected_resource(resource: str, issuer: str) -> dict[str, Any]:
    return {
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "AppDeck",
    }
