"""queued.job: registration, options, the decorator, Setter and the perform_* time rules.

Job classes defined here register globally, so every name starts with ``TJ`` and an autouse
fixture unregisters whatever a test added.
"""
from __future__ import annotations

import datetime as dt
import json
import time
import warnings

import pytest

import queued.client as client_mod
from queued.job import Job, JobFunction, Setter, job, registry, resolve_at


@pytest.fixture(autouse=True)
def clean_registry():
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


def only(r, key):
    items = r.lrange(key, 0, -1)
    assert len(items) == 1, items
    return json.loads(items[0])


def scheduled(r):
    return [(json.loads(m), s) for m, s in r.zrange("schedule", 0, -1, withscores=True)]


# --- registration ------------------------------------------------------------------------------

def test_subclass_registers_under_its_name():
    class TJHard(Job):
        def perform(self, name, count):
            pass

    assert registry.lookup("TJHard") is TJHard
    assert TJHard.queued_name == "TJHard"
    assert "TJHard" in registry.names() and "TJHard" in registry
    assert registry.lookup("TJNope") is None


def test_name_option_serves_a_ruby_class_name_and_is_not_inherited():
    class TJInvoice(Job):
        queued_options = {"name": "Billing::InvoiceJob", "queue": "billing"}

    class TJInvoiceChild(TJInvoice):
        pass

    assert registry.lookup("Billing::InvoiceJob") is TJInvoice
    assert registry.lookup("TJInvoice") is None
    assert registry.lookup("TJInvoiceChild") is TJInvoiceChild
    assert TJInvoiceChild.get_options()["queue"] == "billing"
    assert "name" not in TJInvoice.get_options()


def test_abstract_base_is_not_registered_but_subclasses_are():
    class TJBase(Job):
        queued_options = {"abstract": True, "queue": "base_q"}

    class TJConcrete(TJBase):
        pass

    assert registry.lookup("TJBase") is None and TJBase.queued_name is None
    assert registry.lookup("TJConcrete") is TJConcrete
    assert TJConcrete.get_options() == {"retry": True, "queue": "base_q"}


def _define(source_name: str, module: str = "tests.reloaded"):
    ns: dict = {"Job": Job, "__name__": module}
    exec(f"class {source_name}(Job):\n    def perform(self):\n        pass\n", ns)
    return ns[source_name]


def test_reregistering_same_module_and_qualname_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = _define("TJReloaded")
        second = _define("TJReloaded")  # a module reload
    assert first is not second and registry.lookup("TJReloaded") is second


def test_another_class_under_a_taken_name_warns_and_replaces():
    first = _define("TJClash", "tests.one")
    with pytest.warns(UserWarning, match="TJClash"):
        second = _define("TJClash", "tests.two")
    assert registry.lookup("TJClash") is second and first is not second


def test_registry_register_alias_and_unregister():
    class TJAliased(Job):
        pass

    registry.register(TJAliased, "Old::Name")
    assert registry.lookup("Old::Name") is TJAliased and registry.lookup("TJAliased") is TJAliased
    assert TJAliased.queued_name == "TJAliased"  # an alias does not rename the class
    assert registry.unregister("Old::Name") is TJAliased
    assert registry.unregister("Old::Name") is None
    assert registry.names() == sorted(registry.names())


# --- options -------------------------------------------------------------------------------------

def test_options_merge_along_the_mro():
    class TJA(Job):
        queued_options = {"queue": "a", "retry": 5, "timeout": 10, "backtrace": True}

    class TJB(TJA):
        queued_options = {"retry": 1, "tags": ["x"]}

    class TJC(TJB):
        pass

    assert TJC.get_options() == {"retry": 1, "queue": "a", "timeout": 10, "backtrace": True,
                                 "tags": ["x"]}
    assert list(TJC.get_options()) == ["retry", "queue", "timeout", "backtrace", "tags"]
    assert Job.get_options() == {"retry": True, "queue": "default"}
    # payload keys: retry and queue always, then backtrace/dead/retry_queue/tags when set
    assert TJC.payload_defaults() == {"retry": 1, "queue": "a", "backtrace": True, "tags": ["x"]}


def test_unset_inherited_option_with_none():
    class TJTimeoutBase(Job):
        queued_options = {"timeout": 5, "backtrace": 3}

    class TJNoTimeout(TJTimeoutBase):
        queued_options = {"timeout": None, "backtrace": None}

    assert TJNoTimeout.get_options()["timeout"] is None
    assert "backtrace" not in TJNoTimeout.payload_defaults()


def test_unknown_option_is_a_type_error_naming_class_and_key():
    with pytest.raises(TypeError, match=r"TJTypo.*'queu'"):
        class TJTypo(Job):
            queued_options = {"queu": "x"}
    assert registry.lookup("TJTypo") is None


def test_unknown_option_suggests_the_one_meant():
    with pytest.raises(TypeError, match=r"TJTypo2: unknown queued option 'retires' "
                                        r"\(did you mean 'retry'\?\) \(known: abstract, "):
        class TJTypo2(Job):
            queued_options = {"retires": 3}
    with pytest.raises(TypeError, match=r"'zzz' \(known: "):  # nothing close: no guess
        type("TJTypo3", (Job,), {"queued_options": {"zzz": 1}})


@pytest.mark.parametrize("options", [
    {"queue": ""}, {"queue": 5}, {"retry": -1}, {"retry": "yes"}, {"retry": 1.5},
    {"timeout": 0}, {"timeout": "30"}, {"timeout": True}, {"tags": "a"}, {"dead": 1},
    {"name": ""}, {"abstract": "yes"}, {"backtrace": -2}, {"retry_queue": ""},
])
def test_bad_option_values(options):
    with pytest.raises(TypeError, match="TJBad"):
        type("TJBad", (Job,), {"queued_options": options})


def test_queued_options_must_be_a_dict():
    with pytest.raises(TypeError, match="dict"):
        type("TJNotDict", (Job,), {"queued_options": [("queue", "x")]})


def test_instance_side_defaults():
    class TJInst(Job):
        pass

    j = TJInst()
    assert (j.jid, j.queue, j.msg) == (None, None, None)
    assert j.after_succeeded() is None and j.after_failed(ValueError()) is None
    assert TJInst.retry_in(3, ValueError()) is None
    assert TJInst.retries_exhausted({}, ValueError()) is None
    with pytest.raises(NotImplementedError):
        j.perform()


# --- producing -------------------------------------------------------------------------------

def test_perform_async_uses_class_options(default_client, r):
    class TJCritical(Job):
        queued_options = {"queue": "critical", "retry": 5, "timeout": 30}

    jid = TJCritical.perform_async("bob", 5)
    msg = only(r, "queue:critical")
    assert msg["jid"] == jid and msg["args"] == ["bob", 5] and msg["retry"] == 5
    assert "timeout" not in msg
    assert r.smembers("queues") == {b"critical"}


def test_setter_chaining_and_payload_options(default_client, r):
    class TJSet(Job):
        queued_options = {"queue": "critical", "retry": 5}

    s = TJSet.set(queue="low", retry=False)
    assert isinstance(s, Setter)
    assert s.set(timeout=7, extra={"custom": {"k": 1}}) is s
    jid = s.perform_async("x")
    msg = only(r, "queue:low")
    assert msg["jid"] == jid
    assert list(msg) == ["retry", "queue", "timeout", "custom", "args", "class", "jid",
                         "created_at", "enqueued_at"]
    assert (msg["retry"], msg["timeout"], msg["custom"]) == (False, 7, {"k": 1})
    assert r.llen("queue:critical") == 0


def test_set_validates_known_options():
    class TJSetBad(Job):
        pass

    with pytest.raises(TypeError, match="'queue'"):
        TJSetBad.set(queue="")
    with pytest.raises(TypeError, match="'name'"):
        TJSetBad.set(name="Other")
    with pytest.raises(TypeError, match="'timeout'"):
        TJSetBad.set(timeout=-1)


@pytest.mark.parametrize("typo, meant", [("queu", "queue"), ("retyr", "retry"),
                                         ("wait_untill", "wait_until"), ("at", "wait_until"),
                                         ("eta", "wait_until"), ("countdown", "wait")])
def test_set_refuses_an_unknown_key_and_suggests_the_one_meant(default_client, r, typo, meant):
    class TJSetTypo(Job):
        pass

    with pytest.raises(TypeError) as info:
        TJSetTypo.set(**{typo: 5}).perform_async("x")
    assert str(info.value) == (
        f"{__name__}.test_set_refuses_an_unknown_key_and_suggests_the_one_meant.<locals>."
        f"TJSetTypo.set(): unknown option {typo!r} (did you mean {meant!r}?); set() takes "
        "backtrace, dead, expires_in, jid, queue, retry, retry_queue, tags, timeout, "
        "unique_for, unique_until, wait, wait_until and after_commit, "
        "and payload keys of your own as extra={...}")
    with pytest.raises(TypeError, match=f"unknown option {typo!r}"):
        TJSetTypo.set(queue="low").set(**{typo: 5})  # a chained set() too
    assert r.keys("*") == []


def test_set_extra_writes_payload_keys_of_your_own_in_order(default_client, r):
    class TJExtra(Job):
        pass

    s = TJExtra.set(extra={"tenant": 7, "trace": {"id": "t-1"}}, queue="low")
    s.set(extra={"created_at": 1234.5, "tenant": 8})
    jid = s.perform_async("x")
    msg = only(r, "queue:low")
    assert list(msg) == ["retry", "queue", "tenant", "trace", "created_at", "args", "class",
                         "jid", "enqueued_at"]
    assert (msg["jid"], msg["tenant"], msg["trace"], msg["created_at"]) == (
        jid, 8, {"id": "t-1"}, 1234.5)


@pytest.mark.parametrize("extra, error", [
    ({"queue": "low"}, "give 'queue' as set(queue=...), not in extra"),
    ({"jid": "a" * 24}, "give 'jid' as set(jid=...), not in extra"),
    ({"wait": 5}, "give 'wait' as set(wait=...), not in extra"),
    ({"class": "Other"}, "extra cannot set 'class': the push writes it"),
    ({"args": [1]}, "extra cannot set 'args': the push writes it"),
    ({"at": 1.0}, "extra cannot set 'at': the push writes it"),
    ({"enqueued_at": 1.0}, "extra cannot set 'enqueued_at': the push writes it"),
    ({1: "x"}, "extra keys must be non-empty str, not 1"),
    ({"": "x"}, "extra keys must be non-empty str, not ''"),
    ([("tenant", 7)], "extra must be a dict of payload keys, not list"),
])
def test_set_extra_refuses_what_it_cannot_write_as_given(extra, error):
    class TJExtraBad(Job):
        pass

    with pytest.raises(TypeError) as info:
        TJExtraBad.set(extra=extra)
    assert str(info.value).endswith(f"TJExtraBad.set(): {error}")


def test_set_extra_values_follow_strict_args(default_client, r):
    import queued

    class TJExtraJson(Job):
        pass

    with pytest.raises(queued.JobArgumentsError) as info:
        TJExtraJson.set(extra={"tenant": {"ids": (1, 2)}})
    assert str(info.value).startswith(
        f'{__name__}.test_set_extra_values_follow_strict_args.<locals>.TJExtraJson.set() '
        'extra["tenant"]["ids"]: (1, 2): a tuple: JSON would turn it into a list. Payload '
        'values must be plain JSON')
    previous = queued.strict_args(False)
    try:
        TJExtraJson.set(extra={"tenant": {"ids": (1, 2)}}).perform_async()
    finally:
        queued.strict_args(previous)
    assert only(r, "queue:default")["tenant"] == {"ids": [1, 2]}


def test_set_jid_names_this_push_and_not_a_bulk_one(default_client, r):
    class TJJid(Job):
        pass

    assert TJJid.set(jid="0123456789abcdef01234567").perform_async("x") \
        == "0123456789abcdef01234567"
    assert only(r, "queue:default")["jid"] == "0123456789abcdef01234567"
    with pytest.raises(ValueError, match=r"set\(jid=...\) names one job"):
        TJJid.set(jid="0123456789abcdef01234567").perform_bulk([[1], [2]])
    assert r.llen("queue:default") == 1


def test_set_wait_and_wait_until(default_client, r):
    class TJWait(Job):
        pass

    before = time.time()
    TJWait.set(wait=600).perform_async("w")
    TJWait.set(wait_until=before + 900).perform_async("wu")
    TJWait.set(wait=dt.timedelta(minutes=20)).perform_async("td")
    TJWait.set(wait=-5).perform_async("now")
    got = {m["args"][0]: s for m, s in scheduled(r)}
    assert before + 600 <= got["w"] <= time.time() + 600
    assert got["wu"] == before + 900
    assert before + 1200 <= got["td"] <= time.time() + 1200
    assert only(r, "queue:default")["args"] == ["now"]


def test_perform_in_relative_vs_absolute(default_client, r):
    class TJIn(Job):
        pass

    before = time.time()
    TJIn.perform_in(300, "rel")
    absolute = before + 86400 * 3  # above 1_000_000_000: an epoch
    TJIn.perform_in(absolute, "abs")
    TJIn.perform_in(dt.timedelta(seconds=90), "td")
    TJIn.perform_in(0, "zero")
    got = {m["args"][0]: (m, s) for m, s in scheduled(r)}
    assert before + 300 <= got["rel"][1] <= time.time() + 300
    assert got["abs"][1] == absolute
    assert before + 90 <= got["td"][1] <= time.time() + 90
    m = got["rel"][0]
    assert "at" not in m and "enqueued_at" not in m
    assert list(m) == ["retry", "queue", "class", "args", "jid", "created_at"]
    assert only(r, "queue:default")["args"] == ["zero"]


def test_perform_at_with_datetimes(default_client, r):
    class TJAt(Job):
        pass

    aware = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    naive_local = dt.datetime.now() + dt.timedelta(hours=2)
    TJAt.perform_at(aware, "aware")
    TJAt.perform_at(naive_local, "naive")
    TJAt.perform_at(time.time() + 7200.5, "epoch")
    TJAt.perform_at(dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc), "past")
    got = {m["args"][0]: s for m, s in scheduled(r)}
    assert got["aware"] == aware.timestamp()
    assert got["naive"] == pytest.approx(time.mktime(naive_local.timetuple())
                                         + naive_local.microsecond / 1e6)
    assert abs(got["epoch"] - (time.time() + 7200.5)) < 5
    assert only(r, "queue:default")["args"] == ["past"]


def test_setter_perform_in(default_client, r):
    class TJSetIn(Job):
        queued_options = {"queue": "q1"}

    TJSetIn.set(queue="q2").perform_in(60, "later")
    ((m, s),) = scheduled(r)
    assert m["queue"] == "q2" and list(m)[:4] == ["retry", "queue", "args", "class"]
    TJSetIn.set(queue="q2", wait=600).perform_in(-1, "now")  # perform_in's time wins
    assert only(r, "queue:q2")["args"] == ["now"]


def test_resolve_at_rejects_garbage():
    for bad in ("300", None, True, dt.date.today()):
        with pytest.raises(TypeError):
            resolve_at(bad, 0.0)
    assert resolve_at(999_999_999, 10.0) == 1_000_000_009.0
    assert resolve_at(1_000_000_000, 10.0) == 1_000_000_000.0


def test_perform_bulk(default_client, r):
    class TJBulk(Job):
        queued_options = {"queue": "bulkq"}

    jids = TJBulk.perform_bulk([[1], [2], (3,)])
    assert len(jids) == 3
    popped = [json.loads(r.rpop("queue:bulkq")) for _ in range(3)]
    assert [m["args"] for m in popped] == [[1], [2], [3]]
    assert [m["jid"] for m in popped] == jids
    assert list(popped[0]) == ["retry", "queue", "class", "args", "jid", "created_at",
                               "enqueued_at"]
    assert TJBulk.perform_bulk([]) == []
    with pytest.raises(ValueError):
        TJBulk.perform_bulk([1, 2])
    later = TJBulk.set(wait=60, queue="other").perform_bulk([["a"], ["b"]], batch_size=1)
    assert sorted(m["jid"] for m, _ in scheduled(r)) == sorted(later)
    assert {m["queue"] for m, _ in scheduled(r)} == {"other"}


# --- function form ---------------------------------------------------------------------------

def test_bare_decorator(default_client, r):
    @job
    def tj_send_email(to, subject):
        """Send it."""
        return f"{to}:{subject}"

    assert isinstance(tj_send_email, JobFunction)
    assert tj_send_email("a@b", "hi") == "a@b:hi"  # still the function
    assert tj_send_email.__name__ == "tj_send_email" and tj_send_email.__doc__ == "Send it."
    cls = tj_send_email.job_class
    assert issubclass(cls, Job) and registry.lookup("tj_send_email") is cls
    assert cls().perform("x", "y") == "x:y"
    jid = tj_send_email.perform_async("a@b", "hi")
    msg = only(r, "queue:default")
    assert (msg["class"], msg["args"], msg["jid"]) == ("tj_send_email", ["a@b", "hi"], jid)


def test_decorator_with_options(default_client, r):
    @job(queue="low", retry=3, name="Mailer::Deliver", timeout=5)
    def tj_deliver(n):
        return n * 2

    assert tj_deliver(4) == 8
    assert registry.lookup("Mailer::Deliver") is tj_deliver.job_class
    assert tj_deliver.job_class.get_options() == {"retry": 3, "queue": "low", "timeout": 5}
    tj_deliver.perform_async(1)
    assert only(r, "queue:low")["class"] == "Mailer::Deliver"
    tj_deliver.set(queue="other").perform_async(2)
    tj_deliver.perform_in(100, 3)
    tj_deliver.perform_at(time.time() + 200, 4)
    assert len(tj_deliver.perform_bulk([[5], [6]])) == 2
    assert only(r, "queue:other")["args"] == [2]
    assert [m["args"] for m, _ in scheduled(r)] == [[3], [4]]
    assert r.llen("queue:low") == 3
    # the Client also accepts the decorated function as "class"
    client_mod.default_client().push({"class": tj_deliver, "args": [9], "queue": "fn"})
    assert only(r, "queue:fn")["class"] == "Mailer::Deliver"


def test_decorator_rejects_bad_options_and_non_functions():
    with pytest.raises(TypeError, match="'queu'"):
        @job(queu="x")
        def tj_bad():
            pass
    with pytest.raises(TypeError):
        job(Job)
