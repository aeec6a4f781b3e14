"""queued.payload: parsing with clear errors, validation messages, Ruby-compatible dumping and
Sidekiq 6/7/8 timestamps (SIDEKIQ_FORMAT.md section 3). Pure: no Redis."""
from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import json
import re
import reprlib

import pytest

from queued import arguments, payload
from queued.errors import PayloadError, QueuedError

# A real Sidekiq 6.4.1 push (SIDEKIQ_FORMAT.md section 2).
SIDEKIQ = ('{"retry":5,"queue":"critical","class":"PlainWorker","args":["crit"],'
           '"jid":"aa4be698162a253757f09c1b","created_at":1795235935.0895905,'
           '"enqueued_at":1795235935.089608}')


# --- loads ----------------------------------------------------------------------------------

def test_loads_round_trips_a_sidekiq_payload_byte_for_byte():
    assert payload.dumps(payload.loads(SIDEKIQ)) == SIDEKIQ
    assert payload.dumps(payload.loads(SIDEKIQ.encode())) == SIDEKIQ
    assert list(payload.loads(SIDEKIQ)) == ["retry", "queue", "class", "args", "jid",
                                            "created_at", "enqueued_at"]


def test_payload_error_is_a_queued_error():
    assert issubclass(PayloadError, QueuedError)


def test_loads_bad_utf8():
    with pytest.raises(PayloadError) as info:
        payload.loads(b'{"class":"X","args":["\xff"]}')
    message = str(info.value)
    assert "UTF-8" in message and "byte 22" in message
    assert "\n" not in message


@pytest.mark.parametrize("raw", [b"", b"{", b'{"class":"X",}', b"not json at all",
                                 b'{"a":1} trailing', "{'single':'quotes'}"])
def test_loads_bad_json(raw):
    with pytest.raises(PayloadError) as info:
        payload.loads(raw)
    assert str(info.value).startswith("payload is not valid JSON")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("raw", ['{"class":"X","args":[NaN],"jid":"j"}',
                                 '{"class":"X","args":[-Infinity],"jid":"j"}'])
def test_loads_refuses_nan_and_infinity_which_are_not_json(raw):
    # Ruby's JSON.parse refuses them (so Sidekiq sends such an element to dead), and dumps()
    # cannot write them back: accepted here, they blow up later on a retry or a schedule move.
    with pytest.raises(PayloadError, match="not valid JSON"):
        payload.loads(raw)


@pytest.mark.parametrize("raw,kind", [("[1,2]", "list"), ('"text"', "str"), ("42", "int"),
                                      ("null", ""), ("true", "")])
def test_loads_not_an_object(raw, kind):
    with pytest.raises(PayloadError) as info:
        payload.loads(raw)
    message = str(info.value)
    assert "not an object" in message and kind in message


# --- validate -------------------------------------------------------------------------------

def good(**over):
    msg = {"class": "X", "args": [], "jid": "aa4be698162a253757f09c1b"}
    msg.update(over)
    return {k: v for k, v in msg.items() if v is not ...}


def test_validate_accepts_a_good_payload():
    payload.validate(good())
    payload.validate(json.loads(SIDEKIQ))


@pytest.mark.parametrize("msg,message", [
    (good(**{"class": ...}), 'payload has no "class" string'),
    (good(**{"class": ""}), 'payload has no "class" string'),
    (good(**{"class": 5}), 'payload has no "class" string'),
    (good(args=...), 'payload has no "args"'),
    (good(args={"a": 1}), 'payload "args" is dict, not a list'),
    (good(args="x"), 'payload "args" is str, not a list'),
    (good(jid=""), 'payload "jid" is not a non-empty string'),
    (good(jid=12), 'payload "jid" is not a non-empty string'),
    (good(jid=None), 'payload "jid" is not a non-empty string'),
])
def test_validate_names_the_problem(msg, message):
    with pytest.raises(PayloadError) as info:
        payload.validate(msg)
    assert str(info.value) == message


def test_a_job_without_a_jid_is_valid_and_runs_under_one_made_from_its_bytes():
    # (Sidekiq's server runs a hand-written job without a jid; so does queued)
    raw = b'{"class":"X","args":[1]}'
    payload.validate(json.loads(raw))
    jid = payload.derived_jid(raw)
    assert len(jid) == 24 and int(jid, 16) >= 0
    assert payload.jid_of(raw) == jid == payload.derived_jid(raw)
    assert payload.jid_of(b'{"class":"X","args":[1],"jid":"abc"}') == "abc"
    assert payload.jid_of(b"[1]") is None and payload.jid_of(b"nope") is None


def test_a_payload_nested_deeper_than_the_parser_reads_is_no_job_to_the_masters_reader():
    from queued.server import running
    deep = b"[" * 100_000 + b"]" * 100_000
    assert payload.jid_of(deep) is None
    assert running._jid(b"q\0t\0" + deep) is None  # (a reserved member: queue, token, payload)


# --- dumps ------------------------------------------------------------------------------------

def test_dumps_like_ruby_json_generate():
    msg = {"class": "X", "args": ["caf\u00e9 \u6f22\u5b57 \U0001f600", "a/b", 18446744073709551616,
                                  -(2 ** 70), 1.0, 1, 0.5, True, None, {"k": []}],
           "jid": "j"}
    text = payload.dumps(msg)
    assert text == ('{"class":"X","args":["caf\u00e9 \u6f22\u5b57 \U0001f600","a/b",'
                    '18446744073709551616,-1180591620717411303424,1.0,1,0.5,true,null,{"k":[]}],'
                    '"jid":"j"}')
    assert " " not in text.replace("caf\u00e9 \u6f22\u5b57 ", "")


def test_dumps_escapes_control_characters():
    assert payload.dumps({"a": "x\ny\t\u0001"}) == '{"a":"x\\ny\\t\\u0001"}'


def test_dumps_keeps_big_ints_and_floats_through_loads():
    raw = '{"big":123456789012345678901234567890,"f":1.0,"g":1795235935.0895905,"n":-0.0}'
    assert payload.dumps(payload.loads(raw)) == raw


def test_dumps_falls_back_to_ascii_escapes_for_lone_surrogates():
    # PHP's json_encode can emit "\ud800"; it parses to a lone surrogate, which UTF-8 cannot hold
    msg = payload.loads('{"class":"X","args":["a\\ud800b","\u00e9"],"jid":"j"}')
    text = payload.dumps(msg)
    assert text == '{"class":"X","args":["a\\ud800b","\\u00e9"],"jid":"j"}'
    text.encode("utf-8")  # never raises
    assert payload.loads(text) == msg


def test_dumps_refuses_nan():
    with pytest.raises(ValueError):
        payload.dumps({"a": float("nan")})


# --- timestamps -------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    (1795235935.0895905, 1795235935.0895905),      # Sidekiq 6/7: float seconds
    (1795235935089, 1795235935.089),                # Sidekiq 8: integer milliseconds
    (1795235935, 1795235935.0),                     # integer seconds
    (0, 0.0),
    (1.5, 1.5),
])
def test_to_epoch(value, expected):
    got = payload.to_epoch(value)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("value", [None, "1795235935.0895905", True, False, [1], {}])
def test_to_epoch_rejects_what_is_not_a_number(value):
    assert payload.to_epoch(value) is None


def test_new_jid_is_24_lowercase_hex():
    jids = {payload.new_jid() for _ in range(100)}
    assert len(jids) == 100
    assert all(re.fullmatch("[0-9a-f]{24}", j) for j in jids)


def test_job_class_name():
    assert payload.job_class_name({"class": "X"}) == "X"
    assert payload.job_class_name({"class": "ActiveJobWrapper", "wrapped": "MyJob"}) == "MyJob"
    assert payload.job_class_name({"class": "X", "display_class": "Shown",
                                   "wrapped": "W"}) == "Shown"
    assert payload.job_class_name({}) == "?"


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.5e999"])
def test_loads_refuses_numbers_that_read_as_infinity(number):
    # Python reads them as inf, which dumps() cannot write back on the failure path
    with pytest.raises(PayloadError, match=f"number {number} is out of range"):
        payload.loads('{"class":"X","args":[%s],"jid":"j"}' % number)
    assert payload.loads('{"a":1.5e300}') == {"a": 1.5e300}


# --- strict arguments: the fast check and the walk that explains ------------------------------

class _Flag(enum.IntEnum):
    ON = 1


class _Name(str, enum.Enum):
    ADA = "ada"


def _nested(depth: int, bottom: object) -> object:
    for i in range(depth):
        bottom = [bottom] if i % 2 else {f"k{i}": bottom}
    return bottom


_SELF: list = [0]
_SELF.append(_SELF)
_PLAIN_VALUES = [0, -2**70, "", "ünï 😀", "\ud800", None, True, False, 0.0, -0.0, 1e308, 5e-324,
                 [], {}, [1, [2, [3.5]]], {"a": {"b": [None, {"c": "d"}]}}, {_Name.ADA: 1},
                 _nested(60, "bottom")]
_CHANGED_OR_UNWRITABLE = [
    (1, 2), {1: 2}, {True: 0}, {None: 0}, {1.5: 0}, _Flag.ON, _Name.ADA,
    collections.OrderedDict(a=1), collections.defaultdict(list),
    collections.namedtuple("P", "x")(1),
    float("nan"), float("inf"), -float("inf"), {1, 2}, frozenset(), b"x", bytearray(b"x"),
    decimal.Decimal(1), dt.datetime(2020, 1, 1), dt.date(2020, 1, 1), dt.time(1), object(),
    {(1,): 2}, _SELF, [[[{"deep": [(1,)]}]]], {"a": {"b": {3: 4}}}, [1.5, float("nan")],
    _nested(60, (1,))]


@pytest.mark.parametrize("jobs", [1, 40])  # one job's few values; a bulk push's many
@pytest.mark.parametrize("value", _PLAIN_VALUES + _CHANGED_OR_UNWRITABLE, ids=reprlib.repr)
def test_plainly_json_says_yes_exactly_when_the_walk_finds_nothing(value, jobs):
    args = [["x", value, 1]] * jobs if jobs > 1 else ["x", value, 1]
    found = list(arguments.unsafe_values(args))
    assert arguments.plainly_json(args) is (not found)
    assert (not found) is any(value is v for v in _PLAIN_VALUES)


def test_plainly_json_leaves_nesting_past_its_depth_to_the_walk():
    deep: object = 1
    for _ in range(150):
        deep = [deep]
    assert arguments.plainly_json([deep] * 40) is False  # "look closer"
    assert list(arguments.unsafe_values([deep])) == []  # and closer, nothing is wrong
