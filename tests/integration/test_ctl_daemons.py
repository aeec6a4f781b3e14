"""``queuedctl`` against real daemons: a bulk retry of 100,000 dead jobs while two daemons run
them and a second queuedctl deletes some (every job accounted for), pause and unpause with
jobs waiting, remote quiet, dump and stop (the daemon goes quiet, then exits 0), what
processes, running, stats and ping say about live daemons, and the on-call commands (errors,
find) on what a daemon did: Rails jobs under their own class, the log's pid and worker, a
typo's near name, the backtrace a failure keeps."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import jobs
from ctlrun import ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT, counts, wait_for

N = 100_000


def dead_record_jobs(r, n: int) -> tuple[set[str], set[str]]:
    """``n`` dead Record jobs, as a daemon leaves them; every tenth one's argument is
    ``del-<i>``, the rest ``run-<i>``. (jids of the del- jobs, jids of the others)."""
    died = time.time() - 3600
    doomed, kept = set(), set()
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        jid = f"{i:024x}"
        tag = f"del-{i}" if i % 10 == 0 else f"run-{i}"
        (doomed if i % 10 == 0 else kept).add(jid)
        pipe.zadd("dead", {json.dumps({
            "retry": True, "queue": "default", "class": "Record", "args": [tag], "jid": jid,
            "created_at": died - 60, "enqueued_at": died - 1, "failed_at": died,
            "error_class": "RuntimeError", "error_message": "downstream was down",
            "retry_count": 3, "retried_at": died}, separators=(",", ":")): died + i * 1e-6})
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    return doomed, kept


def start_ctl(url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "queued.admin.ctl", "--redis", url,
                             *args, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ctl_env(), cwd=ROOT)


def finished(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr) == (0, ""), stderr
    return json.loads(stdout)


def test_retry_all_of_100k_dead_jobs_while_another_queuedctl_deletes_some(daemon, r):
    # Given 100,000 dead Record jobs and two daemons (2 workers each) ready to run them
    doomed, kept = dead_record_jobs(r, N)
    assert r.zcard("dead") == N
    d1 = daemon(concurrency=2, job_logging=False)
    d2 = daemon(concurrency=2, job_logging=False)
    # When one queuedctl retries every dead job and, once it has moved a fifth of them, a
    # second deletes every one whose argument says del- (the deleter walks the set faster,
    # catches up and races the retry for the same jobs)
    t0 = time.monotonic()
    retrying = start_ctl(d1.redis_url, "retry", "dead", "--all", "--yes")
    wait_for(lambda: r.zcard("dead") < N * 0.8, 60, interval=0.005,
             what="the retry to take a fifth of the jobs")
    deleting = start_ctl(d1.redis_url, "delete", "dead", "--arg", "del-", "--all", "--yes")
    retried = finished(retrying)
    elapsed = time.monotonic() - t0
    deleted = finished(deleting)
    print(f"\nqueuedctl retry dead --all: {N:,} dead jobs in {elapsed:.2f} s "
          f"({retried['done']:,} retried; {deleted['done']:,} deleted meanwhile)")
    # Then every job was either retried or deleted, by exactly one of them
    assert retried["done"] + deleted["done"] == N
    assert r.zcard("dead") == 0
    # And the daemons run every retried job once
    wait_for(lambda: len(r.hkeys(jobs.RUNS)) >= retried["done"], 90, interval=0.2,
             what="the daemons to run every retried job")
    wait_for(lambda: r.llen("queue:default") == 0 and
             sum(counts(r, jobs.DONE).values()) == retried["done"], 30,
             what="the last jobs to finish")
    runs = counts(r, jobs.RUNS)
    assert set(runs.values()) == {1}  # none twice
    assert counts(r, jobs.DONE) == runs
    ran = set(runs)
    gone = (doomed | kept) - ran
    # every job ran once or was deleted, never both; only del- jobs were deleted
    assert len(ran) == retried["done"] and len(gone) == deleted["done"]
    assert kept <= ran and gone <= doomed
    # (and the race was run: some del- jobs were retried before the deleter reached them)
    assert gone and doomed & ran
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert d1.stop() == 0 and d2.stop() == 0


def test_pause_and_unpause_with_jobs_waiting(daemon, producer, r):
    # Given a daemon serving low before default (strict order), all workers idle
    d = daemon(concurrency=2, queues=["low", "default"], verbose=True)
    url = d.redis_url
    # When low is paused with queuedctl, and jobs are pushed to low, then to default
    assert ok("pause", "low", url=url).startswith("paused queue low")
    d.wait_log("paused queues now: low")
    held = [jobs.Record.set(queue="low").perform_async(f"low-{i}") for i in range(3)]
    ran = jobs.Record.perform_async("default-1")
    # Then default's job runs while low's, first in the daemon's order, wait untouched
    wait_for(lambda: counts(r, jobs.DONE).get(ran) == 1, 10, what="default's job")
    assert not any(j in counts(r, jobs.RUNS) for j in held)
    assert [(q["name"], q["size"], q["paused"]) for q in ctl_json("queues", url=url)] == [
        ("default", 0, False), ("low", 3, True)]
    assert ["low", "3"] == rows(ok("queues", url=url))[1][:2]
    # When low is unpaused
    assert ok("unpause", "low", url=url).startswith("unpaused queue low")
    # Then its jobs run, once each
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held), 10,
             what="low's jobs after the unpause")
    assert ctl_json("stats", url=url)["queues"]["low"] == {
        "size": 0, "latency": 0.0, "paused": False}
    assert d.stop() == 0


def test_remote_quiet_dump_and_stop(daemon, producer, r):
    # Given a daemon running a job (until its gate opens)
    d = daemon(concurrency=2, queues=["default", "low"], tag="ctl")
    url = d.redis_url
    identity = d.identity()
    gated = jobs.Gate.perform_async("ctl-gate")
    wait_for(lambda: counts(r, jobs.RUNS).get(gated), 10, what="the job to start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", 10, what="a beat showing it busy")
    # Then processes and running show it, and ping finds it serving its queues
    (proc,) = ctl_json("processes", url=url)
    assert (proc["identity"], proc["pid"], proc["tag"], proc["busy"], proc["concurrency"],
            proc["queues"], proc["quiet"]) == (identity, d.pid, "ctl", 1, 2,
                                               ["default", "low"], False)
    (row,) = rows(ok("processes", url=url))
    assert row[0] == identity and row[4:7] == ["1/2", "1", "running"]
    (work,) = ctl_json("running", url=url)
    assert (work["identity"], work["jid"], work["class"], work["args"]) == (
        identity, gated, "Gate", ["ctl-gate"])
    assert ctl("ping", "--queue", "low", "--local", url=url).returncode == 0
    # When queuedctl dumps it, then quiets it by the start of its identity (host:pid)
    short = ":".join(identity.split(":")[:2])
    assert ok("dump", short, url=url).startswith(f"TTIN sent to {identity}")
    assert ok("quiet", short, url=url).startswith(f"TSTP sent to {identity}")
    # Then it logs its running job, goes quiet, and says so in its heartbeat
    d.wait_log(f"running Gate jid={gated}")
    wait_for(lambda: ctl_json("processes", url=url)[0]["quiet"], 10,
             what="processes --json to show it quiet")
    assert rows(ok("processes", url=url))[0][6] == "quiet"
    probe = ctl("ping", "--queue", "low", url=url)
    assert (probe.returncode, probe.stdout) == (1, "")
    assert probe.stderr == f"queuedctl: every process serving queue low is quiet ({identity})\n"
    later = jobs.Record.perform_async("after-quiet")
    # When queuedctl stops it and its job is let finish
    assert ctl_json("stop", identity, url=url) == {"signal": "TERM", "processes": [identity]}
    d.wait_log("remote signal TERM")
    jobs.open_gate(r, "ctl-gate")
    # Then it exits 0, having finished its job and taken no new one
    assert d.wait(30) == 0
    assert counts(r, jobs.DONE) == {gated: 1} and later not in counts(r, jobs.RUNS)
    assert ctl_json("processes", url=url) == []
    assert ctl("ping", "--queue", "default", url=url).returncode == 1
    assert ctl_json("stats", url=url)["enqueued"] == 1


def test_a_kill_keeps_as_many_dead_jobs_as_the_daemons_keep(daemon, r):
    # Given a daemon told to keep 20,000 dead jobs for 400 days, 12,000 dead jobs (some
    # older than Sidekiq's 180 days) and one job in retry
    d = daemon(concurrency=1, dead_max_jobs=20_000, dead_timeout_in_seconds=400 * 86400)
    wait_for(lambda: "dead_max_jobs" in r.hget(d.identity(), "info").decode(), 10,
             what="the daemon to publish its dead-set bounds")
    now = time.time()
    r.zadd("dead", {json.dumps({"class": "Record", "args": [i], "jid": f"{i:024x}",
                                "queue": "default"}): now - (i % 300) * 86400 - 1
                    for i in range(12_000)})
    r.zadd("retry", {json.dumps({"class": "Record", "args": ["k"], "jid": "k" * 24,
                                 "queue": "default", "retry_count": 1}): now + 3600})
    # When queuedctl kills it to dead
    assert ctl_json("kill", "retry", "--all", "--yes", url=d.redis_url)["done"] == 1
    # Then dead keeps every job the daemon would keep: none trimmed
    assert r.zcard("dead") == 12_001
    assert d.stop() == 0


def test_the_kubernetes_probe_recipe_reports_a_healthy_pod_live(redis_url, tmp_path, r):
    # Given a pod as docs/queuedctl.md's recipe runs one: REDIS_URL in its environment (how a
    # pod is given its Redis), and an image whose config/sidekiq.yml names another Redis
    # (database 5 here: a Redis nobody runs on)
    from harness import HERE, Daemon
    other = redis_url.rsplit("/", 1)[0] + "/5"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sidekiq.yml").write_text(
        f"redis_url: {other}\nconcurrency: 1\nheartbeat_interval: 0.5\n"
        f"require: [{HERE}/jobs.py]\nproduction:\n  tag: pod\n")
    pod = {"REDIS_URL": redis_url}
    d = Daemon(redis_url, tmp_path, args=("-C", "config/sidekiq.yml", "-e", "production"),
               cwd=tmp_path, env=pod)
    try:
        d.start()
        # the daemon works on the environment's Redis
        assert r.sismember("processes", d.identity())
        # When the recipe's probes run in the pod, exactly as written
        liveness = ["-C", "config/sidekiq.yml", "-e", "production", "ping", "--local",
                    "--timeout", "2"]
        readiness = ["-C", "config/sidekiq.yml", "-e", "production", "ping", "--local",
                     "--queue", "default", "--timeout", "2"]
        for probe in (liveness, readiness):
            done = ctl(*probe, env=pod, cwd=str(tmp_path))
            # Then they find the live daemon: exit 0, silent
            assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), probe
        # and queuedctl reads the Redis the daemon uses, by the same rule
        assert ctl_json("-C", "config/sidekiq.yml", "-e", "production", "processes",
                        env=pod, cwd=str(tmp_path))[0]["identity"] == d.identity()
        assert d.stop() == 0
    finally:
        d.cleanup()


AJ = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"


def rails_job(producer, klass: str, *arguments) -> str:
    """Push a job the way Rails' ActiveJob does through Sidekiq's adapter; its jid."""
    return producer.push({"class": AJ, "wrapped": klass, "queue": "default",
                          "args": [{"job_class": klass, "job_id": "aj-1", "queue_name":
                                    "default", "arguments": list(arguments)}]})


def test_on_call_with_a_live_daemon(daemon, producer, r):
    # Given a daemon running a Rails (ActiveJob) job until its gate opens
    d = daemon(concurrency=2)
    url, identity = d.redis_url, d.identity()
    running = rails_job(producer, "Gate", "oncall-gate")
    wait_for(lambda: counts(r, jobs.RUNS).get(running), 10, what="the Rails job to start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", 10, what="a beat showing it busy")
    # Then running and find name it by its own class, with the pid and worker its log lines
    # will carry
    (work,) = ctl_json("running", url=url)
    assert (work["jid"], work["class"], work["identity"]) == (running, "Gate", identity)
    assert work["pid"] in d.worker_pids() and work["worker"] in ("w0", "w1")
    (place,) = ctl_json("find", running, url=url)["places"]
    assert (place["where"], place["identity"], place["pid"], place["worker"]) == (
        "running", identity, work["pid"], work["worker"])
    # And its log lines say the same pid and worker, and its class, not Rails' wrapper
    jobs.open_gate(r, "oncall-gate")
    d.wait_log(f"pid={work['pid']} tid={work['worker']} class=Gate jid={running} elapsed=")
    assert AJ not in d.output()
    # When jobs fail: one of a class this process does not have (a typo of Record), one
    # Rails job and one plain job of class Fail (no backtrace option)
    typo = producer.push({"class": "Recrod", "args": []})
    failed_rails = rails_job(producer, "Fail", "rails boom")
    failed_plain = jobs.Fail.perform_async("plain boom")
    wait_for(lambda: r.zcard("retry") == 3, 10, what="three jobs in retry")
    # Then errors groups them by their own classes, the unknown one with the near name
    groups = {(g["class"], g["error_class"]): g for g in ctl_json("errors", "retry", url=url)}
    assert sorted(groups) == [("Fail", "RuntimeError"), ("Recrod", "UnknownJobClass")]
    assert groups[("Fail", "RuntimeError")]["count"] == 2
    assert groups[("Recrod", "UnknownJobClass")]["latest_message"] == (
        "no job class named 'Recrod' is registered in this process (did you mean Record?)")
    # And find shows each where it is, the plain one with the backtrace it kept by default
    assert [p["where"] for p in ctl_json("find", typo, url=url)["places"]] == ["retry"]
    (rails,) = ctl_json("find", failed_rails, url=url)["places"]
    assert (rails["where"], rails["job"]["class"]) == ("retry", "Fail")
    said = ok("find", failed_plain, "--backtrace", url=url)
    trace = said.split("backtrace (retry), innermost first:\n")[1].splitlines()
    # (the job's own frames, as its log line shows them: none of queued's around it)
    assert trace == [line for line in trace if "queued/server" not in line] and trace
    assert "jobs.py" in trace[0] and trace[0].endswith("in `perform'") and len(trace) <= 20
    assert d.stop() == 0


def test_task_watch_follows_a_daemon_through_a_retry(daemon, producer, r):
    # Given a daemon and a task of 3 jobs, one of which fails once and is retried (1-10 s on)
    import re
    from queued.task import Task
    import taskjobs
    d = daemon(concurrency=2, require=("taskjobs.py",))
    task = Task("deploy 8")
    with task:
        taskjobs.TOk.perform_async(1)
        taskjobs.TOk.perform_async(2)
        taskjobs.TFlaky.perform_async(3)
    # When a deploy script watches it (stdout a pipe, a line every half second)
    proc = subprocess.Popen([sys.executable, "-m", "queued.admin.ctl", "--redis", d.redis_url,
                             "task", task.id, "--watch", "--every", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ctl_env(), cwd=ROOT)
    stdout, stderr = proc.communicate(timeout=60)
    # Then it ends with the task, exit 0, having said on the way that a job waited for its
    # retry and when that was due
    assert (proc.returncode, stderr) == (0, "")
    lines = [line for line in stdout.splitlines() if re.match(r"\d\d:\d\d:\d\dZ ", line)]
    # (the last moment, moved from retry to its queue by the scheduler, it may be "1
    # retrying" in its task with no retry due)
    waiting = [line for line in lines if "1 retrying" in line]
    assert any(re.search(r"; next retry (in \d+s|now) \(\S+Z\)$", line)
               for line in waiting), lines
    assert re.search(r" succeeded: 3/3 final \(100 %\): 0 enqueued, 0 working, 3 finished, "
                     r"0 failed, 0 retrying, 0 error; [\d.]+ jobs/s$", lines[-1]), lines
    assert d.stop() == 0
