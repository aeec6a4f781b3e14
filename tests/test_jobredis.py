"""queued.jobredis: the job code's client in a worker of one job at a time (get_redis()).

Against the real redis-server: its short path must give what redis-py gives (replies, errors,
the bytes Redis stores), keep the connection in step whatever interrupts a command, connect
once (redis-py 8.2's handshake), and follow the connection's retry policy."""
from __future__ import annotations

import os
import signal
import threading

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.client import CaseInsensitiveDict
from redis.retry import Retry

from queued import jobredis
from queued.jobredis import dedicated

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


def test_the_short_path_gives_what_redis_py_gives(jr, r, redis_py_calls):
    # Given the commands run in order by the job client, then by redis-py, on keys of their
    # own (so the reads read what the writes before them wrote), with values past the
    # parser's 64 kB buffer
    big = b"\x00\xff" * 100_000
    commands = [*COMMANDS, ("set", ("big", big)), ("get", ("big",)),
                ("rpush", ("bl", big, big)), ("lrange", ("bl", 0, -1))]
    for name, args in commands:
        mine = getattr(jr, name)(*_prefixed(args, "job:"))
        # Then the job client's command took the short path, and gave redis-py's reply
        assert redis_py_calls == [], name
        theirs = getattr(r, name)(*_prefixed(args, "py:"))
        redis_py_calls.clear()  # (r's own went there)
        assert mine == theirs, name
    # And Redis holds the same under each prefix
    mine, theirs = sorted(r.keys("job:*")), sorted(r.keys("py:*"))
    assert [k[4:] for k in mine] == [k[3:] for k in theirs] and len(mine) == 9
    for key in mine:
        other = b"py:" + key[4:]
        assert r.type(key) == r.type(other) and _value(r, key) == _value(r, other), key


def _value(r, key):
    read = {b"string": r.get, b"list": lambda k: r.lrange(k, 0, -1), b"hash": r.hgetall,
            b"set": r.smembers, b"zset": lambda k: r.zrange(k, 0, -1, withscores=True)}
    return read[r.type(key)](key)


@pytest.mark.parametrize("name", ["CONFIG\tGET", "CONFIG\nGET", "config get"])
def test_a_command_name_redis_py_splits_goes_its_way(jr, r, redis_py_calls, name):
    # (redis-py splits a name at any whitespace; the short path takes names of letters only)
    assert jr.execute_command(name, "maxmemory") == r.execute_command(name, "maxmemory")
    assert redis_py_calls == [name, name]


def test_response_callbacks_are_applied_as_redis_py_applies_them(jr, r, redis_py_calls):
    # (the short path reads redis-py's callbacks dict itself: a name in any case, a callback
    # set on the client, and a mapping put in its place must each give redis-py's answer)
    r.set("cb", "7")
    jr.set_response_callback("get", lambda value: ("mine", value))
    assert jr.execute_command("GET", "cb") == ("mine", b"7")
    assert jr.execute_command("Get", "cb") == ("mine", b"7")
    assert jr.execute_command("GET", "absent") == ("mine", None)  # (nil replies too)
    assert jr.execute_command("incrbyfloat", "f", "1") == r.execute_command("incrbyfloat", "g", "1")
    jr.response_callbacks = {"get": lambda value: ("plain", value)}
    assert jr.execute_command("get", "cb") == ("plain", b"7")
    assert jr.execute_command("GET", "cb") == b"7"  # (a plain dict is case-sensitive)

    class Mine(CaseInsensitiveDict):  # (a subclass's own get is what redis-py calls)
        def get(self, k, default=None):
            return lambda value: ("sub", value)

    jr.response_callbacks = Mine({})
    assert jr.execute_command("GET", "cb") == ("sub", b"7")
    assert redis_py_calls == ["SET", "incrbyfloat"]  # (r's own: the job client's took the short path)


def test_a_client_with_another_encoding_writes_and_reads_as_redis_py(redis_url, r):
    url = f"{redis_url}?encoding=utf-16"
    jr, plain = dedicated(redis_lib.Redis.from_url(url)), redis_lib.Redis.from_url(url)
    assert jr.short_path == ("utf-16", "strict")
    assert jr.set("k\u00e9", "v\u00e9") is True and plain.set("p\u00e9", "v\u00e9") is True
    assert jr.get("k\u00e9") == plain.get("p\u00e9") == "v\u00e9".encode("utf-16")
    assert r.exists("k\u00e9".encode("utf-16")) == 1
    jr.close()
    plain.close()


def test_a_read_past_the_socket_timeout_raises_redis_pys_error(redis_url):
    url = f"{redis_url}?socket_timeout=0.2"
    jr, plain = dedicated(redis_lib.Redis.from_url(url)), redis_lib.Redis.from_url(url)
    with pytest.raises(redis_lib.TimeoutError) as theirs:
        plain.blpop(["nothing"], 2)
    with pytest.raises(redis_lib.TimeoutError) as mine:
        jr.blpop(["nothing"], 2)
    assert str(mine.value) == str(theirs.value)
    assert jr.connection._sock is None
    jr.close()
    plain.close()


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
    connection is dropped at once, so the next command never reads that command's reply."""
    jr.set("g", "gval")

    def interrupt(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            jr.blpop(["waiting"], 0)  # (0: it waits for as long as its connection lives)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert jr.connection._sock is None
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
    """The short path's first write fails with a reset; the sends made are counted."""
    sent = []
    real = jobredis._send

    def send(sock, packed):
        sent.append(packed)
        if len(sent) == 1:
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
    # (the second try went out on a new connection, through redis-py's send: the short path
    # made one send, the one that failed; the GET after it is the short path's second)
    assert jr.get("retried") == b"1" and len(sent) == 2
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


def test_pipelines_work_as_redis_pys(jr):
    with jr.pipeline() as pipe:
        assert pipe.incr("p").get("p").execute() == [1, b"1"]
    with jr.pipeline(transaction=True) as pipe:
        assert pipe.incr("p").get("p").execute() == [2, b"2"]


def test_the_idle_probe_watches_the_socket_of_the_connection_now(jr, r):
    """A new connection's socket may take another file descriptor than the dropped one's (a
    job's own files and sockets take numbers too): the probe follows the socket."""
    assert jr.incr("c") == 1  # (the probe watches this socket now)
    jr.connection.disconnect()
    squatter = os.pipe()  # (its read end takes the dropped socket's number; never readable)
    try:
        assert jr.incr("c") == 2  # (a new socket, on another number)
        current = jr.connection._sock
        r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        wait_closed_by_server(current)
        assert jr.incr("c") == 3  # (the probe saw the close: a new connection, no error)
        assert jr.connection._sock is not current
    finally:
        os.close(squatter[0])
        os.close(squatter[1])
