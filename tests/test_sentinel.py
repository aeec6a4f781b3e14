"""redis+sentinel:// URLs and the :redis: sentinels form: parsed, written back, checked, and
turned into a client by the one factory every part of queued uses (connection.client_from_url).
Pure logic: the failover itself runs against real processes in
tests/integration/test_sentinel_failover.py."""
from __future__ import annotations

import pytest
import redis
import redis.sentinel

from queued import connection
from queued.config import ConfigError, load
from queued.redisopts import mask_url, redis_options
from queued.sentinel import SentinelURL, is_sentinel_url, parse
from queued.values import Invalid, redis_url


def test_a_full_url_is_read_part_by_part():
    url = ("redis+sentinel://app:s%40cret@10.0.0.1:26380,sentinel-b,[::1]:26381/mymaster/3"
           "?sentinel_password=sp&socket_connect_timeout=2")
    s = parse(url)
    assert s == SentinelURL(sentinels=(("10.0.0.1", 26380), ("sentinel-b", 26379),
                                       ("::1", 26381)),
                            service_name="mymaster", db=3, username="app", password="s@cret",
                            sentinel_password="sp", options=(("socket_connect_timeout", "2"),))
    assert parse(s.url()) == s
    assert is_sentinel_url(url) and not is_sentinel_url("redis://h:6379/0")


def test_the_db_defaults_to_0_and_a_password_alone_is_the_masters():
    s = parse("redis+sentinel://:pw@h:26379/svc")
    assert (s.db, s.username, s.password, s.sentinel_password) == (0, None, "pw", None)


@pytest.mark.parametrize("url, says", [
    ("redis+sentinel://h:26379", "give the service name"),
    ("redis+sentinel://h:26379/svc/x", "must be a number"),
    ("redis+sentinel://h:26379/svc/0/extra", "give the service name"),
    ("redis+sentinel://h:port/svc", "bad port"),
    ("redis+sentinel://h:70000/svc", "bad port"),
    ("redis+sentinel://h:1,/svc", "is empty"),
])
def test_a_bad_url_is_refused_saying_why(url, says):
    with pytest.raises(ValueError, match=says):
        parse(url)
    with pytest.raises(Invalid, match=says):
        redis_url(url)


def test_the_password_is_masked_in_the_log():
    url = "redis+sentinel://:pw@h1:1,h2:2/svc/0?sentinel_password=sp"
    assert mask_url(url) == "redis+sentinel://:****@h1:1,h2:2/svc/0?sentinel_password=****"


def test_the_config_form_becomes_the_same_url():
    opts = redis_options({"sentinels": ["h1:26380", {"host": "h2", "port": 26381}, "h3"],
                          "master_name": "mymaster", "password": "pw", "db": 2,
                          "sentinel_password": "sp"})
    s = parse(opts.full_url())
    assert s.sentinels == (("h1", 26380), ("h2", 26381), ("h3", 26379))
    assert (s.service_name, s.db, s.password, s.sentinel_password) == ("mymaster", 2, "pw", "sp")


def test_redis_rbs_form_names_the_master_in_the_url():
    # Sidekiq (redis-rb): url: redis://mymaster, sentinels: [{host:, port:}], role: master
    opts = redis_options({"url": "redis://:pw@mymaster/1", ":sentinels": [
        {":host": "h1", ":port": 5000}], "role": "master"})
    s = parse(opts.full_url())
    assert (s.sentinels, s.service_name, s.db, s.password) == ((("h1", 5000),), "mymaster",
                                                               1, "pw")


@pytest.mark.parametrize("given, says", [
    ({"sentinels": ["h1"]}, "master_name"),
    ({"sentinels": [], "master_name": "m"}, "at least one"),
    ({"sentinels": [{"port": 1}], "master_name": "m"}, "host"),
    ({"sentinels": ["h1"], "master_name": "m", "role": "replica"}, "master"),
    ({"sentinels": ["h1"], "master_name": "m", "ssl": True}, "TLS"),
    ({"master_name": "m"}, "sentinels"),
])
def test_a_bad_config_form_is_refused_saying_why(given, says):
    with pytest.raises(Invalid, match=says):
        redis_options(given)


def test_the_config_file_takes_the_sentinel_form(tmp_path):
    path = tmp_path / "sidekiq.yml"
    path.write_text(":redis:\n  :sentinels: ['127.0.0.1:26379']\n  :master_name: mymaster\n")
    cfg = load(["-C", str(path)], environ={})
    assert cfg.redis_url == "redis+sentinel://127.0.0.1:26379/mymaster/0"
    path.write_text(":redis:\n  :sentinels: ['127.0.0.1:26379']\n")
    with pytest.raises(ConfigError, match="master_name"):
        load(["-C", str(path)], environ={})


def test_the_factory_makes_a_sentinel_managed_client_with_the_callers_settings():
    client = connection.make_redis("redis+sentinel://:pw@h1:5000,h2:5001/mymaster/4"
                                   "?sentinel_password=sp&socket_connect_timeout=1.5",
                                   name="queued-test")
    pool = client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    kw = pool.connection_kwargs
    assert (kw["db"], kw["password"], kw["client_name"]) == (4, "pw", "queued-test")
    assert kw["socket_timeout"] == connection.SOCKET_TIMEOUT
    assert kw["socket_connect_timeout"] == 1.5  # the URL's option wins, as with redis://
    assert kw["retry"].get_retries() == 0  # queued's own retries only (see make_redis)
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"],
             s.connection_pool.connection_kwargs["port"],
             s.connection_pool.connection_kwargs["password"]) for s in sentinels] == [
        ("h1", 5000, "sp"), ("h2", 5001, "sp")]


def test_the_factory_keeps_plain_urls_as_redis_py_reads_them():
    client = connection.client_from_url("redis://:pw@h:6380/5")
    kw = client.connection_pool.connection_kwargs
    assert (kw["host"], kw["port"], kw["db"], kw["password"]) == ("h", 6380, 5, "pw")


def test_a_sentinel_client_without_a_retry_policy_reconnects_once_on_a_broken_connection():
    # (queued.Client and the job code's get_redis(): the reconnect that finds the new master)
    kw = connection.client_from_url("redis+sentinel://h1:5000/m").connection_pool \
        .connection_kwargs
    retry = kw["retry"]
    assert retry.get_retries() == 1
    assert redis.ConnectionError in retry._supported_errors
    assert redis.TimeoutError not in retry._supported_errors
