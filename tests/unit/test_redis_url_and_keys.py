"""COGMESH_REDIS_URL's three forms, and the key scheme that keeps a session on one cluster slot."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.cluster import key_slot

from services.kit.config import Settings
from services.kit.redis_url import parse_redis_url
from services.lib.redis_keys import (
    OPEN_TURN_BUCKETS,
    SessionKeys,
    TenantKeys,
    identity_key,
    models_keys,
    open_turn_bucket,
    open_turn_buckets,
    session_tag,
)


def test_standalone_urls_pass_through_as_redis_py_reads_them() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://u:p@h:6380/2", "unix:///run/redis.sock"):
        target = parse_redis_url(url)
        assert (target.kind, target.options_url) == ("standalone", url)


def test_a_cluster_url_lists_its_seed_nodes_and_keeps_credentials_and_options() -> None:
    target = parse_redis_url("redis+cluster://user:pw@10.0.0.1:7000,[::1]:7001?health_check_interval=15")
    assert target.kind == "cluster"
    assert target.nodes == (("10.0.0.1", 7000), ("::1", 7001))
    assert target.options_url == "redis://user:pw@10.0.0.1:7000/0?health_check_interval=15"
    assert target.node_url("10.0.0.9", 7005) == "redis://user:pw@10.0.0.9:7005/0?health_check_interval=15"
    assert parse_redis_url("rediss+cluster://h:1").options_url.startswith("rediss://")


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    target = parse_redis_url("redis+sentinel://:secret@s1:26379,s2:26379/mymaster/3?sentinel_password=sp")
    assert (target.kind, target.service, target.sentinel_password) == ("sentinel", "mymaster", "sp")
    assert target.nodes == (("s1", 26379), ("s2", 26379))
    assert target.options_url == "redis://:secret@s1:26379/3"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("memcached://h:1", "must start with one of"),
        ("redis+cluster://", "names no host:port"),
        ("redis+cluster://h:1,h2", "'h2' is not host:port"),
        ("redis+cluster://h:1/2", "database 0 only"),
        ("redis+sentinel://h:1", "must name the Sentinel service"),
    ],
)
def test_a_bad_url_is_refused_at_startup_naming_the_setting_without_its_password(url: str, problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(redis_url=url.replace("://", "://user:hunter2@", 1))
    text = str(caught.value)
    assert "redis_url" in text and problem in text and "hunter2" not in text


def test_a_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ValidationError, match="redis_key_prefix"):
        Settings(redis_key_prefix="app{1}:")


def test_every_key_of_a_session_is_in_one_slot_and_distinct_from_other_sessions() -> None:
    ids = ["0f" * 16, "ab" * 16 + ".1234", "odd}id", "{braced}", ".dot", "", "~x"]
    seen: set[str] = set()
    for session_id in ids:
        keys = SessionKeys("cm:", session_id)
        names = [keys.key(n) for n in ("s", "m", "events", "events:seq", "archive:acme")]
        names.append(identity_key("cm:", keys.tag))
        assert len({key_slot(n.encode()) for n in names}) == 1, (session_id, names)
        assert not seen & set(names[:-1]), f"keys of {session_id!r} collide with another session's"
        seen |= set(names[:-1])


def test_a_user_topic_session_shares_its_identitys_tag() -> None:
    assert session_tag("ab" * 16 + ".77ac640acbd44b1b") == "ab" * 16
    assert session_tag("0f" * 16) == "0f" * 16
    assert session_tag("{x}").startswith("~")


def test_keys_outside_sessions_carry_tags_of_their_own() -> None:
    tenant = TenantKeys("cm:", "acme")
    assert key_slot(tenant.index.encode()) == key_slot(tenant.seq.encode())
    added, version = models_keys("cm:")
    assert key_slot(added.encode()) == key_slot(version.encode())
    buckets = open_turn_buckets("cm:")
    assert len(buckets) == OPEN_TURN_BUCKETS and all(key_slot(d.encode()) == key_slot(g.encode()) for d, g in buckets)
    assert open_turn_bucket("cm:", "some-session") in buckets
    assert len({key_slot(d.encode()) for d, _ in buckets}) == OPEN_TURN_BUCKETS  # spread over slots
