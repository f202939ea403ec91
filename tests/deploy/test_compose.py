"""The compose file: the Compose specification's schema and the suite's shape."""

from __future__ import annotations

from pathlib import Path

import yaml

from deploy import validate


def test_compose_file_matches_the_spec_and_the_suite() -> None:
    assert validate.check_compose() == []


def test_compose_check_catches_a_broken_suite(tmp_path: Path) -> None:
    document = yaml.safe_load(validate.COMPOSE.read_text())
    document["services"]["runtime"]["deploy"]["replicas"] = 1
    document["services"]["policy"]["environment"]["COGMESH_SESSIONS_ADDR"] = "sessions:50055"  # one replica only
    document["services"]["gateway"]["read_onyl"] = True  # a typo the schema must reject
    document["services"]["sessions"]["user"] = "0:0"
    del document["services"]["redis"]
    broken = tmp_path / "compose.yaml"
    broken.write_text(yaml.safe_dump(document))
    (tmp_path / "dev-api-keys.yaml").write_text("keys: []\n")
    problems = "\n".join(validate.check_compose(broken))
    for expected in (
        "runtime has 1 replicas",
        "read_onyl",
        "sessions runs as root",
        "no redis service",
        "COGMESH_SESSIONS_ADDR='sessions:50055', expected dns:///sessions:50055",
    ):
        assert expected in problems


def test_the_dev_keys_file_admits_its_documented_key() -> None:
    from gateway.auth import hash_key, load_keys

    keys_file = validate.COMPOSE.parent / "dev-api-keys.yaml"
    documented = next(
        line.split("=", 1)[1].strip() for line in keys_file.read_text().splitlines() if "COGMESH_API_KEY=" in line
    )
    assert hash_key(documented) in load_keys(keys_file)
