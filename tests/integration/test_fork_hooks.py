"""The fork hooks in a running daemon (tests/forkhookjobs.py): ``before_fork`` in the master
before each fork, ``worker_start`` then ``thread_start`` in each worker before its first job,
for the workers forked at boot and for a worker forked again after a kill -9."""
import json
import os
import signal

from harness import wait_for

NOTES = "t:forkhooks:notes"


def notes(r) -> list[dict]:
    return [json.loads(x) for x in r.lrange(NOTES, 0, -1)]


def push(r, n):
    r.sadd("queues", "default")
    r.lpush("queue:default", json.dumps({"class": "Noted", "args": [n], "queue": "default",
                                         "jid": os.urandom(12).hex(), "retry": True}))


def test_fork_hooks_fire_in_the_master_before_each_fork_and_in_each_worker_before_its_first_job(
        daemon, r):
    # Given a daemon of two workers
    d = daemon(require=("forkhookjobs.py",), concurrency=2)
    first = set(wait_for(lambda: len(d.worker_pids()) == 2 and d.worker_pids(), 10,
                         what="two workers"))
    wait_for(lambda: {n["pid"] for n in notes(r) if n["what"] == "thread_start"} == first, 10,
             what="both workers' thread_start")
    # When one worker is killed (the master forks another) and jobs run
    victim = sorted(first)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(set(d.worker_pids()) - first) == 1, 10, what="the replacement")
    (fresh,) = set(d.worker_pids()) - first
    wait_for(lambda: any(n["pid"] == fresh and n["what"] == "thread_start" for n in notes(r)),
             10, what="the replacement's thread_start")
    for n in range(20):
        push(r, n)
    wait_for(lambda: sum(n["what"] == "perform" for n in notes(r)) == 20, 10, what="20 jobs")
    assert d.stop() == 0
    seen = notes(r)
    # Then the master fired before_fork once per fork, in its own process, before each child
    # existed: three forks, three before_fork
    forks = [n for n in seen if n["what"] == "before_fork"]
    assert [n["pid"] for n in forks] == [d.pid] * 3
    # And each worker fired worker_start, then thread_start in the thread that runs its jobs,
    # once each and before its first job
    for pid in first | {fresh}:
        own = [n for n in seen if n["pid"] == pid]
        whats = [n["what"] for n in own]
        assert whats[:2] == ["worker_start", "thread_start"], whats
        assert whats.count("worker_start") == whats.count("thread_start") == 1
        assert {n["thread"] for n in own if n["what"] in ("thread_start", "perform")} == \
            {own[1]["thread"]}
    # And the jobs ran in workers only
    assert {n["pid"] for n in seen if n["what"] == "perform"} <= first | {fresh}
    # And a before_fork note precedes each worker's first note (it fired before the fork)
    index = {pid: next(i for i, n in enumerate(seen) if n["pid"] == pid)
             for pid in first | {fresh}}
    fork_at = [i for i, n in enumerate(seen) if n["what"] == "before_fork"]
    for pid, i in index.items():
        assert any(f < i for f in fork_at)
    assert sum(f < index[fresh] for f in fork_at) == 3
