import pytest

from appdeck.common.errors import NotFound, PermissionDenied
from appdeck.platform.access import NEEDS, ROLES, allows, can_grant, effective_role, require


def test_tenant_admins_own_every_app_of_their_tenant() -> None:
    assert effective_role("admin", None) == "owner"
    assert effective_role("member", "developer") == "developer"
    assert effective_role("member", None) is None
    assert effective_role("member", "superuser") is None


@pytest.mark.parametrize(
    ("action", "lowest"),
    [
        ("app.read", "viewer"),
        ("deploy.write", "developer"),
        ("app.delete", "admin"),
        ("table.drop", "admin"),
        ("env.reveal", "admin"),
        ("api.keys", "admin"),
        ("oauth_clients", "admin"),
    ],
)
def test_each_action_needs_its_role_or_higher(action: str, lowest: str) -> None:
    for role in ROLES:
        assert allows(role, action) == (ROLES.index(role) >= ROLES.index(lowest))


def test_no_role_looks_like_no_app() -> None:
    with pytest.raises(NotFound):
        require("app.read", None, app_ref="7")


def test_too_low_a_role_is_forbidden_with_a_hint() -> None:
    with pytest.raises(PermissionDenied) as info:
        require("deploy.write", "viewer", app_ref="7")
    assert info.value.hint


def test_every_action_names_a_known_role() -> None:
    assert set(NEEDS.values()) <= set(ROLES)


def test_only_owners_make_owners() -> None:
    assert can_grant("owner", "owner")
    assert not can_grant("admin", "owner")
    assert can_grant("admin", "developer")
    assert not can_grant("developer", "viewer")
