"""GitHub's push webhook payload (docs.github.com, "Webhook events and payloads": push), and its
``X-Hub-Signature-256`` header."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any


def push_payload(sha: str, message: str, *, branch: str = "main", before: str = "0" * 40) -> bytes:
    author = {"name": "Dev", "email": "dev@example.com", "username": "dev"}
    commit = {
        "id": sha,
        "tree_id": "f" * 40,
        "distinct": True,
        "message": message,
        "timestamp": "2026-11-23T22:00:00Z",
        "url": f"https://github.com/octo/shop/commit/{sha}",
        "author": author,
        "committer": author,
        "added": [],
        "removed": [],
        "modified": ["app.py"],
    }
    data: dict[str, Any] = {
        "ref": f"refs/heads/{branch}",
        "before": before,
        "after": sha,
        "repository": {
            "id": 1296269,
            "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5",
            "name": "shop",
            "full_name": "octo/shop",
            "private": False,
            "owner": {"login": "octo", "id": 1},
            "html_url": "https://github.com/octo/shop",
            "clone_url": "https://github.com/octo/shop.git",
            "default_branch": "main",
        },
        "pusher": {"name": "dev", "email": "dev@example.com"},
        "sender": {"login": "dev", "id": 2},
        "created": False,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": f"https://github.com/octo/shop/compare/{before[:12]}...{sha[:12]}",
        "commits": [commit],
        "head_commit": commit,
    }
    return json.dumps(data).encode()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
