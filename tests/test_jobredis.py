"""queued.jobredis: the job code's client in a worker of one job at a time (get_redis()).

Against the real redis-server: its short path must give what redis-py gives (replies, errors,
the bytes Redis stores), keep the connection in step whatever interrupts a command, connect
once (redis-py 8.2's handshake), and follow the connection's retry policy."""
from __future__ import annotations

import signal
import threading

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from queued import jobredis
from queued.jobredis import JobRedis, dedicated

from harness import wait_closed_by_server, wait_for


class Interrupted(BaseException):
    """What a job's time limit raises in the middle of a command (as JobTimeout does)."""


@pytest.fixture
def jr(redis_url):
    client = dedicated(redis_lib.Redis.from_url(redis_url))
    yield client
    client.close()


@pytest.fixture
def redis_py_calls(monkeypatch):
    """Commands that went to redis-py's own path (Redis.execute_command), by name."""
    calls = []
    original = redis_lib.Redis.execute_command

    def counted(self, *args, **options):
        calls.append(args[0])
        return original(self, *args, **options)

    monkeypatch.setattr(redis_lib.Redis, "execute_command", counted)
    return calls


def connections_received(r) -> int:
    return int(r.info("stats")["total_connections_received"])


def test_the_job_connection_connects_once(redis_url, r):
    """redis-py 8.2 sends its handshake's commands (CLIENT SETINFO) before reading a reply; a
    probe of the socket in the connection's send took the first reply for stray data, dropped
    the connection and connected again, over and over, for seconds (every worker's boot)."""
    before = connections_received(r)
    jr = dedicated(redis_lib.Redis.from_url(redis_url))
    assert jr.short_path == ("utf-8", "strict")
    assert jr.incr("once") == 1
    assert connections_received(r) - before == 1
    jr.close()


# (command, its args; keys are prefixed per client) run on both clients, replies compared
COMMANDS = [
    ("incr", ("n",)), ("incrby", ("n", 41)), ("get", ("n",)), ("get", ("missing",)),
    ("set", ("s", "välue")), ("get", ("s",)), ("set", ("b", b"\x00\xff")), ("get", ("b",)),
    ("rpush", ("l", 1, 2.5, "x", b"y", -7, 1e100, 0.1)), ("lrange", ("l", 0, -1)),
    ("llen", ("l",)), ("hset", ("h", "f", 3)), ("hgetall", ("h",)), ("hincrby", ("h", "f", 2)),
    ("incrbyfloat", ("f", 0.25)), ("exists", ("n", "missing")), ("expire", ("n", 100)),
    ("delete", ("s",)), ("sadd", ("set", "a", "b")), ("smembers", ("set",)),
    ("zadd", ("z", {"m": 1.5, "n": 2})), ("zscore", ("z", "m")), ("zcard", ("z",)),
    ("ping", ()), ("echo", (b"hi",)),
]


def _prefixed(args, prefix):
    if not args:
        return args
    first = args[0]
    return (prefix + first, *args[1:]) if isinstance(first, str) else args


@pytest.mark.parametrize("name,args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_the_short_path_gives_what_redis_py_gives(jr, r, redis_py_calls, name, args):
    # Given one command run by the job client, then by redis-py, on keys of their own
    mine = getattr(jr, name)(*_prefixed(args, "job:"))
    took_short_path = not redis_py_calls
    theirs = getattr(r, name)(*_prefixed(args, "py:"))
    # Then the job client's took the short path, the replies are equal, and so is what
    # Redis holds under each prefix
    assert took_short_path
    assert mine == theirs
    for key in r.keys("job:*"):
        other = b"py:" + key[4:]
        assert r.type(key) == r.type(other)
        assert _value(r, key) == _value(r, other)


def _value(r, key):
    read = {b"string": r.get, b"list": lambda k: r.lrange(k, 0, -1), b"hash": r.hgetall,
            b"set": r.smembers, b"zset": lambda k: r.zrange(k, 0, -1, withscores=True)}
    return read[r.type(key)](key)


def test_commands_with_options_go_to_redis_pys_path(jr, redis_py_calls):
    jr.zadd("z", {"a": 1, "b": 2})
    assert jr.zrange("z", 0, -1, withscores=True) == [(b"a", 1.0), (b"b", 2.0)]
    assert redis_py_calls == ["ZRANGE"]


def test_error_replies_raise_redis_pys_errors_and_leave_the_connection_in_step(jr):
    jr.rpush("list", "x")
    with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
        jr.incr("list")
    with pytest.raises(redis_lib.exceptions.NoScriptError):
        jr.evalsha("0" * 40, 0)
    sock = jr.connection._sock
    assert jr.set("after", "ok") is True and jr.get("after") == b"ok"
    assert jr.connection._sock is sock  # (the same connection: an error reply is no error of it)


def test_an_error_reply_that_means_a_lost_connection_is_raised_as_redis_py_raises_it(
        jr, r, redis_py_calls):
    # (LOADING: redis-py reads it as BusyLoadingError, a ConnectionError, and drops the
    # connection; a Lua error reply is the way to have a running server send it)
    script = "return redis.error_reply('LOADING Redis is loading the dataset in memory')"
    with pytest.raises(redis_lib.BusyLoadingError) as theirs:
        r.eval(script, 0)
    sock = jr.connection._sock
    with pytest.raises(redis_lib.BusyLoadingError) as mine:
        jr.eval(script, 0)
    assert str(mine.value) == str(theirs.value)
    assert redis_py_calls == ["EVAL"]  # (r's: the job client's took the short path)
    assert jr.connection._sock is None  # (dropped, as redis-py drops it)
    assert jr.incr("after-loading") == 1 and jr.connection._sock is not sock


@pytest.mark.parametrize("value", [True, None, object()])
def test_arguments_redis_py_refuses_are_refused_as_it_refuses_them(jr, value):
    with pytest.raises(redis_lib.DataError) as mine:
        jr.set("k", value)
    with pytest.raises(redis_lib.DataError) as theirs:
        redis_lib.Redis().connection_pool.get_encoder().encode(value)
    assert str(mine.value) == str(theirs.value)


def test_bytes_like_arguments_are_written_as_redis_py_writes_them(jr):
    assert jr.set("ba", bytearray(b"ab\x00")) is True
    assert jr.set("mv", memoryview(b"cd")) is True
    assert jr.mget("ba", "mv") == [b"ab\x00", b"cd"]


def test_a_client_that_decodes_replies_gets_str(redis_url):
    jr = dedicated(redis_lib.Redis.from_url(redis_url, decode_responses=True))
    assert jr.short_path is not None
    jr.set("u", "héllo")
    assert jr.get("u") == "héllo" and jr.incr("c") == 1
    jr.close()


def test_a_command_interrupted_between_write_and_read_leaves_no_reply_for_the_next(jr, r):
    """A job's time limit (SIGALRM) raised while a command waits for its reply: the
    connection is dropped, so the next command never reads that command's late reply."""
    jr.set("g", "gval")

    def interrupt(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            jr.blpop(["waiting"], 5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # (the late reply would be this element, had the BLPOP stayed on its connection; pushed
    # once Redis has dropped the interrupted client, which it does on its next turn)
    wait_for(lambda: not [c for c in r.client_list() if "b" in c["flags"]],
             what="Redis to drop the blocked client")
    r.rpush("waiting", "late")
    assert jr.get("g") == b"gval"
    assert r.lrange("waiting", 0, -1) == [b"late"]


def test_a_connection_the_server_closed_while_idle_is_replaced_before_the_command(jr, r):
    first = jr.connection._sock
    assert jr.incr("c") == 1
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_closed_by_server(first)  # (then the probe before the command sees it)
    assert jr.incr("c") == 2
    assert jr.connection._sock is not first


def _fail_first_send(monkeypatch):
    sent = []
    real = jobredis._send

    def send(sock, packed):
        if not sent:
            sent.append(packed)
            raise ConnectionResetError(104, "Connection reset by peer")
        real(sock, packed)

    monkeypatch.setattr(jobredis, "_send", send)
    return sent


def test_a_broken_connection_is_retried_as_the_policy_says(redis_url, monkeypatch):
    # Given a client whose policy retries once, and a write that fails with a reset
    jr = dedicated(redis_lib.Redis.from_url(redis_url))
    jr.connection.retry = Retry(NoBackoff(), 1)
    sent = _fail_first_send(monkeypatch)
    # Then the command goes out again on a new connection, once
    assert jr.incr("retried") == 1
    assert len(sent) == 1 and jr.get("retried") == b"1"
    jr.close()


def test_a_broken_connection_fails_the_command_when_the_policy_does_not_retry(jr, monkeypatch):
    jr.connection.retry = Retry(NoBackoff(), 0)
    _fail_first_send(monkeypatch)
    with pytest.raises(redis_lib.ConnectionError):
        jr.incr("not-retried")
    assert jr.connection._sock is None  # (dropped: the next command connects afresh)
    assert jr.incr("not-retried") == 1


def test_threads_share_the_connection_one_command_at_a_time(jr):
    seen: dict[int, list[int]] = {}

    def count(i):
        seen[i] = [jr.incr("shared") for _ in range(300)]

    threads = [threading.Thread(target=count, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = sorted(n for replies in seen.values() for n in replies)
    assert every == list(range(1, 1801))
    assert all(replies == sorted(replies) for replies in seen.values())


@pytest.mark.parametrize("query", ["protocol=3", "health_check_interval=30"])
def test_clients_set_up_otherwise_take_redis_pys_path(redis_url, redis_py_calls, query):
    jr = dedicated(redis_lib.Redis.from_url(f"{redis_url}?{query}"))
    assert jr.short_path is None
    assert jr.incr("n") == 1
    assert redis_py_calls == ["INCRBY"]
    jr.close()


def test_a_job_redis_is_a_redis_py_client(jr):
    assert isinstance(jr, redis_lib.Redis) and isinstance(jr, JobRedis)
    with jr.pipeline() as pipe:
        assert pipe.incr("p").get("p").execute() == [1, b"1"]
