"""The shared Redis test support (tests/support/redis_server.py) does what other tests rely on."""

from __future__ import annotations

import redis

from tests.support.redis_server import (
    RedisServer,
    delete_prefix,
    free_port,
    ping,
    reachable_redis,
    unique_prefix,
)


def test_a_private_server_is_started_when_no_redis_answers() -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    with reachable_redis(default=nowhere) as url:
        assert url != nowhere and ping(url)
    assert not ping(url), "the private server is stopped afterwards"


def test_kill_and_restart_keep_acknowledged_writes_with_appendonly() -> None:
    with RedisServer(appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
        server.restart(crash=True)
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        server.pause()
        try:
            assert not ping(server.url, 0.2), "a paused server does not answer"
        finally:
            server.resume()
        assert ping(server.url)
        client.close()


def test_delete_prefix_removes_only_that_prefix_even_with_glob_characters(private_redis: RedisServer) -> None:
    client = redis.Redis.from_url(private_redis.url)
    prefix = unique_prefix("test_x[redis]*?")
    assert "[" not in prefix and "*" not in prefix
    raw = "cogmesh-test:weird[a]*:"
    client.mset({f"{prefix}1": 1, f"{prefix}2": 2, f"{raw}1": 1, f"{raw}x": 1, "cogmesh-test:weirda:1": 1, "other": 1})
    assert delete_prefix(private_redis.url, prefix) == 2
    assert delete_prefix(private_redis.url, raw) == 2
    assert sorted(client.keys()) == [b"cogmesh-test:weirda:1", b"other"]
    client.close()
