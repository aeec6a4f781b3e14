"""queued.client: the exact commands and bytes a push writes (SIDEKIQ_FORMAT.md sections 2-3).

Most tests use the real redis-server from conftest; a few pure-logic ones use fakeredis.
"""
from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import json
import os
import time
import uuid

import fakeredis
import pytest
import redis as redis_lib

import queued
import queued.client as client_mod
from queued.client import Client
from queued.job import Job, registry
from queued.middleware import client_middleware

from harness import wait_closed_by_server

NOW = 1795235935.0895905
JID = "aa4be698162a253757f09c1b"


class CliPlainWorker(Job):
    def perform(self, *args):
        pass


class CliCritical(Job):
    queued_options = {"queue": "critical", "retry": 5, "timeout": 3}

    def perform(self, *args):
        pass


@pytest.fixture
def pinned(monkeypatch):
    """Pin the clock to NOW and hand out jids from a known sequence."""
    jids = iter([JID] + [f"{i:024x}" for i in range(1, 10_000)])
    monkeypatch.setattr(client_mod, "clock", lambda: NOW)
    monkeypatch.setattr(client_mod, "new_jid", lambda: next(jids))


@pytest.fixture
def commands(monkeypatch):
    """Every round trip a Client makes: a list of (transaction, [command args...]). A push
    writes its commands in one packet on a connection of the Client's own (Client._execute),
    never inside MULTI, so transaction is always False; the fallback through a redis-py
    Pipeline is recorded too."""
    seen: list[tuple[bool, list[tuple]]] = []
    real_execute = Client._execute
    real_pipeline = redis_lib.client.Pipeline.execute

    def execute(self, cmds):
        seen.append((False, [tuple(c) for c in cmds]))
        return real_execute(self, cmds)

    def pipeline_execute(self, *a, **kw):
        seen.append((self.transaction, [tuple(args) for args, _ in self.command_stack]))
        return real_pipeline(self, *a, **kw)

    monkeypatch.setattr(Client, "_execute", execute)
    monkeypatch.setattr(redis_lib.client.Pipeline, "execute", pipeline_execute)
    return seen


@pytest.fixture
def middleware():
    before = set(client_middleware)
    yield client_middleware
    for cls in set(client_middleware) - before:
        client_middleware.remove(cls)


# --- perform_async / push ------------------------------------------------------------------------

def test_perform_async_writes_exactly_what_sidekiq_writes(default_client, r, pinned, commands):
    jid = CliCritical.perform_async("crit")
    assert jid == JID
    expected = ('{"retry":5,"queue":"critical","args":["crit"],"class":"CliCritical",'
                '"jid":"aa4be698162a253757f09c1b","created_at":1795235935.0895905,'
                '"enqueued_at":1795235935.0895905}')
    assert commands == [(False, [("SADD", "queues", "critical"),
                                 ("LPUSH", "queue:critical", expected)])]
    assert r.smembers("queues") == {b"critical"}
    assert r.lrange("queue:critical", 0, -1) == [expected.encode()]
    assert sorted(r.keys("*")) == [b"queue:critical", b"queues"]


def test_client_push_key_order_matches_section_3_1(default_client, r, pinned):
    # SIDEKIQ_FORMAT 3.1 queue:critical [0], built by Client.push (class before args)
    default_client.push({"class": "PlainWorker", "args": ["crit"], "queue": "critical", "retry": 5})
    assert r.lrange("queue:critical", 0, -1) == [
        b'{"retry":5,"queue":"critical","class":"PlainWorker","args":["crit"],'
        b'"jid":"aa4be698162a253757f09c1b","created_at":1795235935.0895905,'
        b'"enqueued_at":1795235935.0895905}']


def test_enqueued_at_is_push_time_and_created_at_is_kept(default_client, r):
    before = time.time()
    jid = default_client.push({"class": "X", "args": [], "created_at": 1234.5, "jid": "j" * 24})
    msg = json.loads(r.rpop("queue:default"))
    assert jid == "j" * 24 and msg["created_at"] == 1234.5
    assert before <= msg["enqueued_at"] <= time.time()
    # caller-given jid/created_at stay where the caller put them (Ruby's ||= on a present key)
    assert list(msg) == ["retry", "queue", "class", "args", "created_at", "jid", "enqueued_at"]


def test_unknown_keys_preserved_in_order(default_client, r, pinned):
    default_client.push({"class": "PlainWorker", "args": ["custom"], "tags": ["alpha", "beta"],
                         "custom": {"tenant": 7, "trace": "abc"}, "x_extra": 1})
    assert r.lpop("queue:default") == (
        b'{"retry":true,"queue":"default","class":"PlainWorker","args":["custom"],'
        b'"tags":["alpha","beta"],"custom":{"tenant":7,"trace":"abc"},"x_extra":1,'
        b'"jid":"aa4be698162a253757f09c1b","created_at":1795235935.0895905,'
        b'"enqueued_at":1795235935.0895905}')


def test_args_round_trip_byte_exact(default_client, r):
    args = [1, -2, 1099511627776, 2**64 + 7, 1.0, 3.14159, "str", "ünïcødé ☃ 日本語 😀",
            {"nested": {"a": [1, 2, {"b": None}]}}, None, True, False, [], "a/b", "\u0001"]
    CliPlainWorker.perform_async(*args)
    raw = r.rpop("queue:default")
    assert ('"args":[1,-2,1099511627776,18446744073709551623,1.0,3.14159,"str",'
            '"ünïcødé ☃ 日本語 😀",{"nested":{"a":[1,2,{"b":null}]}},null,true,false,[],'
            '"a/b","\\u0001"]').encode() in raw
    back = json.loads(raw)["args"]
    assert back == args and type(back[4]) is float and type(back[0]) is int


def test_job_class_payload_options(default_client, r):
    class CliOptsJob(Job):
        queued_options = {"queue": "low", "retry": 3, "backtrace": 10, "dead": False,
                          "retry_queue": "rq", "tags": ["a"], "timeout": 9}

    CliOptsJob.perform_async("bt")
    msg = json.loads(r.rpop("queue:low"))
    assert list(msg) == ["retry", "queue", "backtrace", "dead", "retry_queue", "tags", "args",
                         "class", "jid", "created_at", "enqueued_at"]
    assert "timeout" not in msg
    CliOptsJob.set(timeout=2.5).perform_async("t")
    assert json.loads(r.rpop("queue:low"))["timeout"] == 2.5
    registry.unregister("CliOptsJob")


def test_push_with_job_class_and_string_class(default_client, r):
    default_client.push({"class": CliCritical, "args": [1], "queue": "other"})
    assert json.loads(r.rpop("queue:other"))["retry"] == 5
    # a class *name* gets Sidekiq's default options, as in Ruby (the class need not exist here)
    default_client.push({"class": "CliCritical", "args": [1]})
    msg = json.loads(r.rpop("queue:default"))
    assert msg["retry"] is True and msg["class"] == "CliCritical"


def test_push_does_not_mutate_the_item(default_client):
    item = {"class": "X", "args": [1], "at": time.time() + 60}
    copy = json.loads(json.dumps(item))
    default_client.push(item)
    assert item == copy


# --- scheduling ---------------------------------------------------------------------------------

def test_scheduled_job_goes_to_schedule_without_at_or_enqueued_at(default_client, r, pinned, commands):
    CliPlainWorker.perform_in(600, "scheduled", 42)
    assert r.keys("*") == [b"schedule"]
    ((member, score),) = r.zrange("schedule", 0, -1, withscores=True)
    assert member == (b'{"retry":true,"queue":"default","class":"CliPlainWorker",'
                      b'"args":["scheduled",42],"jid":"aa4be698162a253757f09c1b",'
                      b'"created_at":1795235935.0895905}')
    assert score == NOW + 600
    assert commands == [(False, [("ZADD", "schedule", NOW + 600, member.decode())])]


def test_at_in_the_past_goes_straight_to_the_queue(default_client, r):
    default_client.push({"class": "X", "args": [1], "at": time.time() - 5})
    CliPlainWorker.perform_in(-1, 2)
    CliPlainWorker.perform_at(time.time() - 1, 3)
    assert r.zcard("schedule") == 0
    msgs = [json.loads(m) for m in r.lrange("queue:default", 0, -1)]
    assert [m["args"] for m in msgs] == [[3], [2], [1]]
    assert all("at" not in m and "enqueued_at" in m for m in msgs)


def test_push_with_future_at(default_client, r):
    at = time.time() + 30
    jid = default_client.push({"class": "X", "args": [], "at": at, "queue": "q"})
    ((member, score),) = r.zrange("schedule", 0, -1, withscores=True)
    msg = json.loads(member)
    assert score == at and msg["jid"] == jid and msg["queue"] == "q"
    assert "at" not in msg and "enqueued_at" not in msg
    assert not r.exists("queues")  # SADD queues happens when the scheduler enqueues it


# --- push_bulk -------------------------------------------------------------------------------

def test_push_bulk_one_sadd_one_lpush_fifo_shared_timestamps(default_client, r, commands):
    jids = default_client.push_bulk({"class": "X", "args": [[1], [2], [3]], "queue": "bulk"})
    assert len(set(jids)) == 3
    assert len(commands) == 1
    (transaction, cmds), = commands
    assert not transaction
    assert [c[:2] for c in cmds] == [("SADD", "queues"), ("LPUSH", "queue:bulk")]
    assert len(cmds[1]) == 2 + 3
    popped = [json.loads(r.rpop("queue:bulk")) for _ in range(3)]
    assert [m["args"] for m in popped] == [[1], [2], [3]]  # FIFO: j1 comes out first
    assert [m["jid"] for m in popped] == jids
    assert len({m["created_at"] for m in popped}) == 1
    assert len({m["enqueued_at"] for m in popped}) == 1


def test_push_bulk_chunks(default_client, r, commands):
    jids = default_client.push_bulk({"class": "X", "args": [[i] for i in range(5)]}, batch_size=2)
    assert [len(cmds[1]) - 2 for _, cmds in commands] == [2, 2, 1]
    popped = [json.loads(r.rpop("queue:default")) for _ in range(5)]
    assert [m["args"][0] for m in popped] == list(range(5))
    assert [m["jid"] for m in popped] == jids
    assert len({(m["created_at"], m["enqueued_at"]) for m in popped}) == 1


def test_push_bulk_default_chunk_is_1000(default_client, r, commands):
    default_client.push_bulk({"class": "X", "args": [[i] for i in range(2500)]})
    assert [len(cmds[1]) - 2 for _, cmds in commands] == [1000, 1000, 500]
    assert r.llen("queue:default") == 2500
    assert json.loads(r.rpop("queue:default"))["args"] == [0]


def test_push_bulk_scheduled(default_client, r, commands):
    at = time.time() + 100
    jids = default_client.push_bulk({"class": "X", "args": [["a"], ["b"]], "at": at})
    (_, cmds), = commands
    assert [c[:2] for c in cmds] == [("ZADD", "schedule")]
    members = r.zrange("schedule", 0, -1, withscores=True)
    assert sorted(json.loads(m)["jid"] for m, _ in members) == sorted(jids)
    assert {s for _, s in members} == {at}
    assert all("at" not in json.loads(m) and "enqueued_at" not in json.loads(m) for m, _ in members)


def test_push_bulk_at_per_job(default_client, r):
    now = time.time()
    default_client.push_bulk({"class": "X", "args": [["a"], ["b"], ["c"]],
                              "at": [now + 10, now + 20, now - 1]})
    assert [(json.loads(m)["args"], s) for m, s in r.zrange("schedule", 0, -1, withscores=True)] \
        == [(["a"], now + 10), (["b"], now + 20)]
    assert json.loads(r.rpop("queue:default"))["args"] == ["c"]


class _PassThrough:
    """A client middleware that changes nothing: push_bulk then encodes job by job."""

    def __call__(self, job, msg, queue, call_next):
        return call_next()


@pytest.mark.parametrize("item, spliced", [
    ({"class": "X", "args": [[1], [1.0], [1e20], [1e15], [-0.0], [2**70], [None, True, False],
                             ["ünï", "😀", "\u0000", "a\"b\\c/d"], [{"": {}, "1": [[]]}],
                             ["\ud800"], ['"\\u0000queued:args\\u0000"'], []]}, True),
    ({"class": "Billing::Ünicode", "queue": "crème", "args": [["x"], ["\ud800"]]}, False),
    ({"class": CliCritical, "args": [["crit"], [3.5]], "tags": ["t"], "extra": {"k": [1.5]}},
     True),
    ({"class": "X", "args": [[1], [2]], "jid": "given", "enqueued_at": 1.5}, True),
    ({"class": "X", "jid": "given", "args": [[1], [2]]}, False),  # jid before args: no cut
    ({"class": "X", "args": [[1], [2]], "at": NOW + 600}, True),
])
def test_push_bulk_writes_what_per_job_encoding_writes(default_client, r, monkeypatch,
                                                      middleware, item, spliced):
    """Without middleware push_bulk encodes a batch once and splices each job's args and jid
    in (Client._push_alike); the bytes must be what encoding each job on its own gives."""
    real = Client._push_alike
    used = []

    def spy(self, *a):
        jids = real(self, *a)
        used.append(jids is not None)
        return jids

    monkeypatch.setattr(Client, "_push_alike", spy)

    def written(with_middleware):
        jids = iter(f"{i:024x}" for i in range(1, 100))
        monkeypatch.setattr(client_mod, "clock", lambda: NOW)
        monkeypatch.setattr(client_mod, "new_jid", lambda: next(jids))
        if with_middleware:
            middleware.add(_PassThrough)
        try:
            returned = default_client.push_bulk(dict(item), batch_size=5)
        finally:
            middleware.remove(_PassThrough)
        state = {k: r.lrange(k, 0, -1) if r.type(k) == b"list"
                 else r.zrange(k, 0, -1, withscores=True) if r.type(k) == b"zset"
                 else sorted(r.smembers(k)) for k in sorted(r.keys("*"))}
        r.flushdb()
        return returned, state

    assert written(with_middleware=False) == written(with_middleware=True)
    assert used and all(u == spliced for u in used)


def test_push_bulk_validation():
    c = Client(fakeredis.FakeRedis())
    assert c.push_bulk({"class": "X", "args": []}) == []
    for bad in ({"class": "X", "args": [1, 2]}, {"class": "X", "args": "no"},
                {"class": "X", "args": [[1]], "at": "soon"},
                {"class": "X", "args": [[1]], "at": []},
                {"class": "X", "args": [[1], [2]], "at": [1.0]}):
        with pytest.raises(ValueError):
            c.push_bulk(bad)
    with pytest.raises(ValueError):
        c.push_bulk({"class": "X", "args": [[1]]}, batch_size=0)


# --- namespace, raw, validation ------------------------------------------------------------------

def test_namespace_prefixes_every_key(redis_url, r):
    c = Client(url=redis_url, namespace="ns")
    c.push({"class": "X", "args": [1], "queue": "q"})
    c.push({"class": "X", "args": [1], "at": time.time() + 60})
    c.push_bulk({"class": "X", "args": [[1], [2]]})
    c.push_raw("raw", b"{}")
    assert sorted(r.keys("*")) == [b"ns:queue:default", b"ns:queue:q", b"ns:queue:raw",
                                   b"ns:queues", b"ns:schedule"]
    assert r.smembers("ns:queues") == {b"q", b"default", b"raw"}
    c.redis.close()


def test_push_raw_writes_the_exact_bytes(default_client, r, commands):
    raw = b'{"class":"X","args":[1.0],"jid":"abc","weird":"\\ud83d\\ude00"}'
    default_client.push_raw("rawq", raw)
    assert commands == [(False, [("SADD", "queues", "rawq"), ("LPUSH", "queue:rawq", raw)])]
    assert r.lrange("queue:rawq", 0, -1) == [raw]


@pytest.mark.parametrize("item", [
    {"class": "X"},
    {"args": []},
    {"class": "X", "args": (1, 2)},
    {"class": "", "args": []},
    {"class": 42, "args": []},
    {"class": dict, "args": []},
    {"class": "X", "args": [], "at": "tomorrow"},
    {"class": "X", "args": [], "at": None},
    {"class": "X", "args": [], "queue": ""},
    {"class": "X", "args": [], "queue": None},
    {"class": "X", "args": [], "tags": "a,b"},
    {"class": "X", "args": [], 1: 2},
    ["class", "X"],
])
def test_normalize_rejects(item):
    with pytest.raises(ValueError):
        Client(fakeredis.FakeRedis()).normalize(item)


def test_normalize_abstract_class_rejected():
    class CliAbstract(Job):
        queued_options = {"abstract": True}

    with pytest.raises(ValueError, match="abstract"):
        Client(fakeredis.FakeRedis()).normalize({"class": CliAbstract, "args": []})


def test_normalize_order_and_defaults():
    c = Client(fakeredis.FakeRedis())
    msg = c.normalize({"x": 1, "class": "X", "queue": "q", "args": [], "retry": False})
    assert list(msg) == ["retry", "queue", "x", "class", "args", "jid", "created_at"]
    assert msg["retry"] is False and msg["queue"] == "q" and len(msg["jid"]) == 24
    int(msg["jid"], 16)
    # Ruby truthiness: a created_at of 0 is kept
    assert c.normalize({"class": "X", "args": [], "created_at": 0})["created_at"] == 0


def test_non_json_args_fail_before_anything_is_written():
    fr = fakeredis.FakeRedis()
    with pytest.raises(TypeError):
        Client(fr).push({"class": "X", "args": [object()]})
    with pytest.raises(ValueError):
        Client(fr).push({"class": "X", "args": [float("nan")]})
    assert fr.keys("*") == []


# --- strict arguments (Sidekiq 7's strict_args!) ----------------------------------------------

class CliColor(enum.IntEnum):
    RED = 1


CliPoint = collections.namedtuple("CliPoint", "x y")
_RELAX = ('queued.strict_args("warn") or queued.strict_args(False) lets such values through as '
          'JSON writes them')
_PLAIN = ("Job arguments must be plain JSON: str, int, float, bool, None, lists, and dicts with "
          "str keys")


@pytest.fixture
def strict_mode():
    """queued.strict_args as a test leaves it is put back to what it was."""
    before = queued.strict_args("raise")
    queued.strict_args(before)
    yield queued.strict_args
    queued.strict_args(before)


def test_strict_args_is_the_default_and_names_the_value_and_the_way_out(default_client, r):
    with pytest.raises(queued.JobArgumentsError) as info:
        CliPlainWorker.perform_async("bob", {1: 2})
    assert str(info.value) == ('CliPlainWorker args[1]: {1: 2}: a dict key 1 (int) is not a '
                               f'string: JSON would turn it into "1". {_PLAIN} ({_RELAX})')
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert r.keys("*") == []


@pytest.mark.parametrize("args, where, why", [
    ([(1, 2)], "args[0]: (1, 2)", "a tuple: JSON would turn it into a list"),
    (["a", {"k": [0, {True: 1}]}], 'args[1]["k"][1]: {True: 1}',
     'a dict key True (bool) is not a string: JSON would turn it into "true"'),
    ([{None: 1}], "args[0]: {None: 1}",
     'a dict key None (NoneType) is not a string: JSON would turn it into "null"'),
    ([{1.5: 1}], "args[0]: {1.5: 1}",
     'a dict key 1.5 (float) is not a string: JSON would turn it into "1.5"'),
    ([CliColor.RED], "args[0]: <CliColor.RED: 1>",
     "CliColor is a subclass of int: JSON would give it back as a plain int"),
    ([CliPoint(1, 2)], "args[0]: CliPoint(x=1, y=2)",
     "CliPoint is a subclass of tuple: JSON would give it back as a plain list"),
    ([collections.OrderedDict(a=1)], "args[0]: OrderedDict([('a', 1)])",
     "OrderedDict is a subclass of dict: JSON would give it back as a plain dict"),
])
def test_strict_args_refuse_what_json_gives_back_changed(default_client, r, args, where, why):
    with pytest.raises(queued.JobArgumentsError) as info:
        CliPlainWorker.perform_async(*args)
    assert str(info.value) == f"CliPlainWorker {where}: {why}. {_PLAIN} ({_RELAX})"
    assert r.keys("*") == []


@pytest.mark.parametrize("value, why", [
    (dt.datetime(2024, 5, 1, 12, 0), "datetime is not a JSON type: pass a str (.isoformat()) "
                                     "or an epoch (.timestamp())"),
    (dt.date(2024, 5, 1), "date is not a JSON type: pass a str (.isoformat())"),
    ({3}, "set is not a JSON type: pass a list"),
    (b"\x00", "bytes is not a JSON type: pass a str (decoded, or base64)"),
    (decimal.Decimal("1.10"), "Decimal is not a JSON type: pass a str (exact) or a float"),
    (float("nan"), "JSON has no NaN or Infinity"),
    (float("-inf"), "JSON has no NaN or Infinity"),
    (uuid.UUID(int=1), "UUID is not a JSON type"),
    ({(1, 2): "pair"}, "a dict key (1, 2) (tuple) is not a string: JSON cannot write it"),
])
@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_strict_args_refuse_what_json_cannot_write_in_raise_and_warn_mode(
        default_client, r, strict_mode, mode, value, why):
    strict_mode(mode)
    with pytest.raises(queued.JobArgumentsError) as info:
        CliPlainWorker.perform_async("ok", {"deep": [value]})
    assert str(info.value) == f'CliPlainWorker args[1]["deep"][0]: {value!r}: {why}. {_PLAIN}'
    assert r.keys("*") == []


def test_strict_args_refuse_a_list_that_holds_itself(default_client, r):
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(queued.JobArgumentsError, match=r"args\[0\]\[1\]: .* it contains itself: "
                                                       "JSON cannot write it"):
        CliPlainWorker.perform_async(loop)
    assert r.keys("*") == []


def test_strict_args_check_every_job_of_a_bulk_push_before_writing_any(default_client, r):
    args = [[i, {"n": i}] for i in range(40)]
    args[33][1] = {"n": (33,)}
    with pytest.raises(queued.JobArgumentsError) as info:
        CliPlainWorker.perform_bulk(args, batch_size=10)
    assert str(info.value).startswith('CliPlainWorker args[33][1]["n"]: (33,): a tuple: ')
    with pytest.raises(queued.JobArgumentsError, match=r"args\[2\]\[0\]: \{1: 2\}"):
        default_client.push_bulk({"class": "X", "args": [[1], [2], [{1: 2}]]})
    assert r.keys("*") == []


def test_strict_args_warn_pushes_what_json_writes_with_one_warning(default_client, r, strict_mode):
    assert strict_mode("warn") == "raise"  # returns the mode it replaces
    with pytest.warns(queued.arguments.ArgumentsWarning) as caught:
        jid = CliPlainWorker.perform_async((1, 2), {1: 2})
    (warning,) = caught
    assert str(warning.message) == ("CliPlainWorker args[0]: (1, 2): a tuple: JSON would turn "
                                    f"it into a list. {_PLAIN}")
    assert warning.filename == __file__  # the line that pushed, not queued's insides
    msg = json.loads(r.rpop("queue:default"))
    assert (msg["jid"], msg["args"]) == (jid, [[1, 2], {"1": 2}])


def test_strict_args_false_pushes_without_looking(default_client, r, strict_mode):
    strict_mode(False)
    CliPlainWorker.perform_async((1, 2), {1: 2}, CliColor.RED)
    default_client.push_bulk({"class": "X", "args": [[(3,)]] * 20})
    assert json.loads(r.rpop("queue:default"))["args"] == [[1, 2], {"1": 2}, 1]
    assert [json.loads(m)["args"] for m in r.lrange("queue:default", 0, -1)] == [[[3]]] * 20
    with pytest.raises(TypeError) as info:  # JSON's own error: nothing looked for the place
        CliPlainWorker.perform_async(dt.date(2024, 1, 1))
    assert not isinstance(info.value, queued.JobArgumentsError)
    assert strict_mode(True) is None and strict_mode(None) == "raise"
    with pytest.raises(ValueError, match="strict_args takes"):
        strict_mode("loud")


# --- middleware ----------------------------------------------------------------------------------

def test_client_middleware_modifies_and_cancels(default_client, r, middleware):
    calls = []

    class Tag:
        def __call__(self, job, msg, queue, call_next):
            calls.append((job, queue))
            msg["tenant"] = 7
            return call_next()

    class CancelOdd:
        def __call__(self, job, msg, queue, call_next):
            if msg["args"][0] % 2:
                return None
            return call_next()

    middleware.add(Tag)
    middleware.add(CancelOdd)
    assert CliPlainWorker.perform_async(1) is None
    jid = CliPlainWorker.perform_async(2)
    assert jid is not None
    assert calls == [("CliPlainWorker", "default")] * 2
    (raw,) = r.lrange("queue:default", 0, -1)
    msg = json.loads(raw)
    assert msg["jid"] == jid and msg["tenant"] == 7
    assert list(msg)[-2:] == ["tenant", "enqueued_at"]

    jids = default_client.push_bulk({"class": "X", "args": [[1], [2], [3], [4]], "queue": "b"})
    assert len(jids) == 2
    assert [json.loads(m)["args"] for m in r.lrange("queue:b", 0, -1)] == [[4], [2]]


def test_middleware_can_reroute_and_returning_none_after_next_still_pushes(default_client, r,
                                                                          middleware):
    class Reroute:
        def __call__(self, job, msg, queue, call_next):
            msg["queue"] = "elsewhere"
            call_next()  # forgot to return: the push still happens (call_next was reached)

    middleware.add(Reroute)
    CliPlainWorker.perform_async(1)
    assert r.smembers("queues") == {b"elsewhere"}
    assert r.llen("queue:elsewhere") == 1


# --- default client --------------------------------------------------------------------------

def test_default_client_from_redis_url(redis_url, r, monkeypatch):
    monkeypatch.setattr(client_mod, "_default", None)
    monkeypatch.setenv("REDIS_URL", redis_url)
    c = client_mod.default_client()
    assert client_mod.default_client() is c and client_mod.get_redis() is c.redis
    assert c.keys.ns == ""
    CliPlainWorker.perform_async(1)
    assert r.llen("queue:default") == 1
    c.redis.close()


def test_default_url_without_env(monkeypatch):
    monkeypatch.setattr(client_mod, "_default", None)
    monkeypatch.delenv("REDIS_URL", raising=False)
    kw = client_mod.default_client().redis.connection_pool.connection_kwargs
    assert (kw["host"], kw["port"], kw.get("db", 0)) == ("127.0.0.1", 6379, 0)


def test_configure_with_namespace_and_redis(monkeypatch, r):
    monkeypatch.setattr(client_mod, "_default", None)
    c = client_mod.configure(redis=r, namespace="app")
    assert client_mod.default_client() is c and client_mod.get_redis() is r
    CliPlainWorker.perform_async(1)
    assert r.llen("app:queue:default") == 1


def test_job_class_client_attribute(redis_url, r, default_client):
    other = Client(url=redis_url, namespace="other")

    class CliOwnClient(Job):
        client = other

    class CliApiClient(Job):
        client = object()  # the job's own API client: not a queued Client, so ignored

    CliOwnClient.perform_async(1)
    CliApiClient.perform_async(1)
    assert r.llen("other:queue:default") == 1 and r.llen("queue:default") == 1
    registry.unregister("CliOwnClient")
    registry.unregister("CliApiClient")
    other.redis.close()


def test_default_client_survives_fork(default_client, r):
    """The master configures and uses the client, then forks: the child's first push must open
    its own connection (the Client drops the connections it inherited, as redis-py resets an
    inherited pool), and the parent's keeps working on its own."""
    CliPlainWorker.perform_async("parent-before")
    default_client.redis.ping()
    parent_conn = default_client._idle[0]  # the Client's own push connection
    parent_sock = parent_conn._sock
    parent_pool_conn = default_client.redis.connection_pool._available_connections[0]
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            client_mod.default_client().push({"class": "X", "args": ["child"], "queue": "forked"})
            client_mod.get_redis().ping()
            pool = client_mod.get_redis().connection_pool
            code = 0 if parent_conn not in client_mod.default_client()._idle else 2
            if parent_pool_conn in pool._available_connections:
                code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    CliPlainWorker.perform_async("parent-after")
    assert default_client._idle == [parent_conn]
    assert parent_conn._sock is parent_sock  # same socket: the child did not shut it down
    assert default_client.redis.connection_pool._available_connections[0] is parent_pool_conn
    assert r.llen("queue:forked") == 1 and r.llen("queue:default") == 2


def test_push_after_the_server_closed_the_idle_connection(default_client, r):
    """The Client's own connection was closed by the server while idle (Redis restarted,
    CLIENT KILL, Redis's idle timeout): the next push connects afresh instead of failing, as a
    push through redis-py's pool would."""
    CliPlainWorker.perform_async("before")
    (conn,) = default_client._idle
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_closed_by_server(conn._sock)
    CliPlainWorker.perform_async("after")
    assert default_client._idle == [conn]  # same connection object, reconnected
    assert [json.loads(m)["args"] for m in r.lrange("queue:default", 0, -1)] \
        == [["after"], ["before"]]


def test_failover_error_reconnects_and_retries_once():
    class Pipe:
        def __init__(self, owner):
            self.owner = owner
            self.cmds = []

        def sadd(self, *a):
            self.cmds.append(("sadd",) + a)

        def lpush(self, *a):
            self.cmds.append(("lpush",) + a)

        def execute(self):
            self.owner.attempts.append(self.cmds)
            if len(self.owner.attempts) <= self.owner.fail_times:
                raise redis_lib.ReadOnlyError("You can't write against a read only replica.")
            return [1, 1]

    class Pool:
        def __init__(self):
            self.disconnects = 0

        def disconnect(self):
            self.disconnects += 1

    class FakeRedis:
        def __init__(self, fail_times):
            self.fail_times = fail_times
            self.attempts = []
            self.connection_pool = Pool()

        def pipeline(self, transaction=True):
            assert transaction is False
            return Pipe(self)

    fr = FakeRedis(1)
    Client(fr).push_raw("q", "{}")
    assert len(fr.attempts) == 2 and fr.attempts[0] == fr.attempts[1]
    assert fr.connection_pool.disconnects == 1
    with pytest.raises(redis_lib.ReadOnlyError):
        Client(FakeRedis(2)).push_raw("q", "{}")


# --- job code's dedicated connection in a worker -----------------------------------------------

def test_dedicated_job_connection_is_one_connection_that_survives_a_server_close(default_client, r):
    """In a worker, get_redis() holds one connection (no pool checkout per command). When the
    server closes it while idle (a Redis restart, CLIENT KILL), the next command reconnects
    instead of failing the job that sends it."""
    client_mod.dedicate_job_connection()
    jr = client_mod.get_redis()
    assert jr is default_client.redis and jr.connection is not None
    assert jr.incr("dedicated") == 1
    first = jr.connection
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_closed_by_server(first._sock)
    assert jr.incr("dedicated") == 2  # no ConnectionError
    assert jr.connection is first
    with jr.pipeline() as pipe:  # pipelines use the same connection
        assert pipe.incr("dedicated").get("dedicated").execute() == [3, b"3"]


def test_dedicated_job_connection_keeps_a_client_the_application_passed(redis_url, monkeypatch):
    mine = redis_lib.Redis.from_url(redis_url)
    monkeypatch.setattr(client_mod, "_default", None)
    client_mod.configure(redis=mine)
    client_mod.dedicate_job_connection()
    assert client_mod.get_redis() is mine


def test_dedicated_job_connection_falls_back_to_the_pool_when_redis_is_away(monkeypatch):
    from tests.conftest import free_port
    monkeypatch.setattr(client_mod, "_default", None)
    pooled = client_mod.configure(url=f"redis://127.0.0.1:{free_port()}/0").redis
    client_mod.dedicate_job_connection()  # no exception: nothing listens there
    assert client_mod.get_redis() is pooled
