"""The gateway's API keys file: what each entry lets its key do, and the files it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.auth import hash_key, load_keys
from services.kit.errors import PermissionDenied


def keys_file(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text("keys:\n" + "".join(f"  - {entry}\n" for entry in entries))
    return path


def test_pins_without_allow_let_a_request_set_no_other_key(tmp_path: Path) -> None:
    browser = hash_key("browser")
    principal = load_keys(
        keys_file(tmp_path, f"{{sha256: {browser}, tenant: acme, principal: web, scope: {{pin: {{end_user: alice}}}}}}")
    )[browser]
    assert principal.session_scope({}) == {"end_user": "alice"}
    with pytest.raises(PermissionDenied, match=r"may not set scope key 'role' \(it may set: none\)"):
        principal.session_scope({"role": "admin"})  # RoleGate would read it: a bounded key picks no role


def test_a_key_without_scope_rules_sets_any_key(tmp_path: Path) -> None:
    backend = hash_key("backend")
    principal = load_keys(keys_file(tmp_path, f"{{sha256: {backend}, tenant: acme, principal: app}}"))[backend]
    assert principal.session_scope({"role": "admin", "end_user": "bob"}) == {"role": "admin", "end_user": "bob"}


def test_an_allow_list_with_pins_is_kept(tmp_path: Path) -> None:
    web = hash_key("web")
    rules = "{pin: {end_user: alice}, allow: [project]}"
    principal = load_keys(keys_file(tmp_path, f"{{sha256: {web}, tenant: acme, principal: web, scope: {rules}}}"))[web]
    assert principal.session_scope({"project": "p1"}) == {"end_user": "alice", "project": "p1"}
    with pytest.raises(PermissionDenied, match="it may set: project"):
        principal.session_scope({"role": "admin"})


def test_a_key_listed_twice_is_refused_naming_both_entries(tmp_path: Path) -> None:
    # The later entry would silently replace the earlier one's tenant or pins.
    same = hash_key("shared")
    path = keys_file(
        tmp_path,
        f"{{sha256: {same}, tenant: acme, principal: alice, scope: {{pin: {{end_user: alice}}}}}}",
        f"{{sha256: {hash_key('other')}, tenant: acme, principal: other}}",
        f"{{sha256: {same}, tenant: acme, principal: backend}}",
    )
    with pytest.raises(ValueError, match=r"keys.yaml:4: keys\[2\]\.sha256: the same key as keys\[0\]"):
        load_keys(path)
