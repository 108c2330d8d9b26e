"""The source rule (platform/sources.py): a tenant reads only its own roots, never the data dir."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.sources import SourceRoots


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _refusal(roots: SourceRoots, tenant: str, path: object) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        roots.check(tenant, path)
    return caught.value


@pytest.fixture
def tenant_roots(tmp_path: Path) -> SourceRoots:
    _dir(tmp_path / "data" / "keys")
    _dir(tmp_path / "sources" / "acme" / "shop")
    _dir(tmp_path / "sources" / "globex" / "secret-app")
    return SourceRoots([tmp_path / "sources" / "{tenant}"], data_dir=tmp_path / "data")


def test_a_source_in_the_tenants_own_root_is_accepted_and_resolved(
    tenant_roots: SourceRoots, tmp_path: Path
) -> None:
    shop = tmp_path / "sources" / "acme" / "shop"
    assert tenant_roots.check("acme", str(shop)) == shop.resolve()
    assert tenant_roots.check("acme", f"{shop}/./") == shop.resolve()


def test_another_tenants_root_is_refused_without_naming_it(
    tenant_roots: SourceRoots, tmp_path: Path
) -> None:
    theirs = tmp_path / "sources" / "globex" / "secret-app"
    error = _refusal(tenant_roots, "acme", str(theirs))
    assert "outside your source roots" in error.message
    assert error.hint is not None
    assert str(tmp_path / "sources" / "acme") in error.hint
    assert "globex" not in error.hint
    assert "globex" not in error.message.replace(str(theirs), "")


def test_the_roots_parent_which_holds_every_tenants_root_is_refused(
    tenant_roots: SourceRoots, tmp_path: Path
) -> None:
    assert "outside" in _refusal(tenant_roots, "acme", str(tmp_path / "sources")).message


def test_the_data_dir_its_insides_and_its_parents_are_refused(
    tenant_roots: SourceRoots, tmp_path: Path
) -> None:
    for path in (tmp_path / "data", tmp_path / "data" / "keys", tmp_path, Path("/")):
        _refusal(tenant_roots, "acme", str(path))


def test_a_configured_root_overlapping_the_data_dir_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = _dir(tmp_path / "work" / "data")
    _dir(data / "runtime" / "1-1")
    with caplog.at_level(logging.WARNING, logger="appdeck.sources"):
        roots = SourceRoots(
            [tmp_path / "work", data, data / "runtime", data / "{tenant}"], data_dir=data
        )
    assert caplog.text.count("is dropped") == 4
    assert roots.roots_for("acme") == []
    for path in (tmp_path / "work", data, data / "runtime" / "1-1"):
        error = _refusal(roots, "acme", str(path))
        assert error.hint is not None
        assert "no source root is open to your tenant" in error.hint


def test_a_tenant_whose_expanded_root_is_the_data_dir_gets_no_root(tmp_path: Path) -> None:
    data = _dir(tmp_path / "data")
    _dir(tmp_path / "acme")
    roots = SourceRoots([tmp_path / "{tenant}"], data_dir=data)
    assert roots.roots_for("data") == []
    _refusal(roots, "data", str(data))
    assert roots.check("acme", str(tmp_path / "acme")) == (tmp_path / "acme").resolve()


def test_a_link_out_of_the_root_is_refused(tenant_roots: SourceRoots, tmp_path: Path) -> None:
    mine = tmp_path / "sources" / "acme"
    (mine / "to-data").symlink_to(tmp_path / "data")
    (mine / "to-globex").symlink_to(tmp_path / "sources" / "globex" / "secret-app")
    (mine / "to-etc").symlink_to("/etc")
    for link in ("to-data", "to-globex", "to-etc"):
        error = _refusal(tenant_roots, "acme", str(mine / link))
        assert "leads outside your source roots" in error.message, link


def test_a_folder_swapped_for_a_link_fails_the_next_check(
    tenant_roots: SourceRoots, tmp_path: Path
) -> None:
    shop = tmp_path / "sources" / "acme" / "shop"
    tenant_roots.check("acme", str(shop))
    shop.rmdir()
    shop.symlink_to(tmp_path / "data")
    _refusal(tenant_roots, "acme", str(shop))


def test_malformed_paths_are_refused(tenant_roots: SourceRoots, tmp_path: Path) -> None:
    mine = tmp_path / "sources" / "acme"
    (mine / "file.txt").write_text("x")
    cases = {
        "relative/path": "absolute path",
        f"{mine}/shop/../shop": "without '..'",
        f"{mine}/sh\x00op": "absolute path",
        "": "non-empty string",
        str(mine / "missing"): "does not exist",
        str(mine / "file.txt"): "not a directory",
    }
    for path, expected in cases.items():
        assert expected in _refusal(tenant_roots, "acme", path).message, path
    assert "non-empty string" in _refusal(tenant_roots, "acme", 42).message


def test_a_path_outside_the_roots_gets_the_same_answer_whether_it_exists_or_not(
    tenant_roots: SourceRoots,
) -> None:
    there = _refusal(tenant_roots, "acme", "/etc").message
    missing = _refusal(tenant_roots, "acme", "/no/such/dir").message
    assert there.replace("'/etc'", "X") == missing.replace("'/no/such/dir'", "X")


def test_a_shared_root_above_the_tenant_roots_does_not_open_another_tenants_root(
    tmp_path: Path,
) -> None:
    _dir(tmp_path / "srv" / "sources" / "acme" / "shop")
    _dir(tmp_path / "srv" / "sources" / "globex" / "app")
    _dir(tmp_path / "srv" / "shared" / "lib")
    roots = SourceRoots(
        [tmp_path / "srv", tmp_path / "srv" / "sources" / "{tenant}"], data_dir=tmp_path / "data"
    )
    srv = tmp_path / "srv"
    assert roots.check("acme", str(srv / "shared" / "lib")) == (srv / "shared" / "lib").resolve()
    assert roots.check("acme", str(srv / "sources" / "acme" / "shop"))
    error = _refusal(roots, "acme", str(srv / "sources" / "globex" / "app"))
    assert "another tenant's source root" in error.message
    _refusal(roots, "acme", str(srv))
    _refusal(roots, "acme", str(srv / "sources"))


def test_a_tenant_id_unsafe_in_a_path_has_no_root(tmp_path: Path) -> None:
    _dir(tmp_path / "sources" / "x")
    roots = SourceRoots([tmp_path / "sources" / "{tenant}"], data_dir=tmp_path / "data")
    for tenant in ("..", "../sources/x", ".hidden", ""):
        assert roots.roots_for(tenant) == []
        _refusal(roots, tenant, str(tmp_path / "sources" / "x"))


def test_the_default_root_is_beside_the_data_dir_and_made_on_first_use(tmp_path: Path) -> None:
    data = _dir(tmp_path / "home" / ".appdeck")
    roots = SourceRoots([], data_dir=data)
    mine = tmp_path / "home" / "appdeck-sources" / "acme"
    assert not mine.exists()
    assert roots.roots_for("acme") == [mine.resolve()]
    assert mine.is_dir()
    app = _dir(mine / "hello")
    assert roots.check("acme", str(app)) == app.resolve()
    _refusal(roots, "globex", str(app))
    _refusal(roots, "acme", str(data))


def test_a_root_without_tenant_is_shared_by_every_tenant(tmp_path: Path) -> None:
    app = _dir(tmp_path / "src" / "hello")
    roots = SourceRoots([str(tmp_path / "src")], data_dir=tmp_path / "data")
    assert roots.check("acme", str(app)) == roots.check("globex", str(app)) == app.resolve()
