"""A worker process: reserve -> run under middleware and a time limit -> ack or fail.

One job at a time (SIGALRM only works in a process's main thread). The worker tells its master
what it is doing through the shared slot table, never through Redis. It owns no signal except
its own: TERM means "finish the job in hand, then exit 0"; INT, TSTP and USR1 belong to the
master (a Ctrl-C or Ctrl-Z in the terminal reaches the whole process group); USR2 prints the
Python stack (the master's TTIN asks for it).

Whatever the worker holds when it exits, for any reason, is put back by the master.
"""
from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import random
import signal
import sys
import time

import redis

from . import log as logsetup
from . import payload as codec
from . import activejob, client, events, retry, titles
from .errors import JobTimeout, PayloadError, UnknownJobClass
from .fetch import GONE, REFUSED, Fetcher, Reservation
from .job import registry
from .middleware import server_middleware
from .slots import Notes, SlotWriter, Watch
from .timeout import job_timeout

log = logging.getLogger("queued.worker")

#: A batch grows (doubles, up to ``prefetch``) only while jobs average under this many seconds,
#: so a prefetched job never waits long behind a slow one.
FAST_JOB = 0.005
#: A job class whose recent runs took this long (or is new) counts as possibly slow: the acks of
#: the jobs finished before it are written before it starts (see _release_finished).
SLOW_JOB = 0.002
#: Redis outage backoff: first wait, cap (seconds).
BACKOFF_START, BACKOFF_MAX = 0.1, 5.0
#: A queue whose key is not a list is logged at most this often (seconds) by the whole daemon.
BAD_QUEUE_LOG_INTERVAL = 60.0
#: Seconds between attempts to write a failure Redis refused (its target key holds another
#: type): the job stays reserved meanwhile (fail.lua).
HELD_RETRY = 5.0
#: Seconds a worker waits before asking again while its master is not registered.
UNREGISTERED_NAP = 0.25

_PR_SET_PDEATHSIG = 1


def note_labels(config) -> list:
    """The conditions the workers of one master log once per interval between them."""
    return [*(("queue", q) for q in config.queue_names), ("key", "retry"), ("key", "dead"),
            "unregistered"]


class _Wake(BaseException):
    """Raised by the TERM handler only while blocked in Redis, to stop waiting at once."""


class Worker:
    """Built in the master before fork; ``run`` is the child's whole life."""

    def __init__(self, config, keys, identity: str, slot: int, table, master_pid: int,
                 notes: Notes | None = None, watch: Watch | None = None,
                 idle_fd: int | None = None):
        self.config = config
        self.notes = notes if notes is not None else Notes(note_labels(config))
        self.watch = watch if watch is not None else Watch(config.concurrency)
        self.idle_fd = idle_fd  # a byte written here tells the master we block (waker.py)
        self._preference = _idle_preference(config)
        self.keys = keys
        self.identity = identity
        self.slot = slot
        self.table = table
        self.master_pid = master_pid
        self.stopping = False
        self.blocking = False
        self.batch = 1
        #: Failures Redis refused to store (fail.lua): (reservation, kind, score, payload).
        self.held: list[tuple[Reservation, str, float, str | bytes]] = []
        self.next_held_retry = 0.0
        self._class_timeouts: dict[type, float | None] = {}
        self._durations: dict[str, float] = {}  # job class -> recent run time (seconds)

    # --- process setup -----------------------------------------------------------------------
    def run(self) -> None:
        """Never returns: the child leaves through os._exit so nothing of the master's
        (atexit handlers, an embedded Redis) runs twice."""
        code = 0
        try:
            self._init_process()
            self._loop()
        except BaseException:  # noqa: BLE001 - last resort, the master requeues our jobs
            log.exception("worker %d crashed", self.slot)
            code = 1
        finally:
            try:
                self.fetcher.close()
            except Exception:  # noqa: BLE001
                pass
            logging.shutdown()
        os._exit(code)

    def _init_process(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTSTP, signal.SIGUSR1, signal.SIGHUP,
                    signal.SIGTTIN, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        self._die_with_master()
        random.seed()
        logsetup.retag(f"w{self.slot}")
        self.joblog = logsetup.JobLog(log.name)
        self.joblog.bind()
        self.writer = SlotWriter(self.table, self.slot, os.getpid())
        self.writer.tick()  # the record names this pid from now on (the master never writes it)
        client.dedicate_job_connection()
        cfg = self.config
        self.fetcher = Fetcher(
            cfg.redis_url, self.keys, self.identity, self.slot, cfg.queue_names,
            cfg.weighted_queues, cfg.strict, cfg.fetch_timeout,
            cfg.dead_timeout_in_seconds, cfg.dead_max_jobs)
        self.title = titles.WorkerTitle(cfg.tag, self.slot)
        self.title.idle()

    def _die_with_master(self) -> None:
        """Ask Linux to SIGKILL this worker when the master dies. It was a TERM, on which a
        worker finishes its job: but once the dead master's lease expires another master puts
        that job back and runs it, so a job longer than the lease ran twice at the same time.
        Killed at once, it runs again after the lease, once (at-least-once)."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != self.master_pid:
            self.stopping = True

    def _on_term(self, signum, frame):
        self.stopping = True
        if self.blocking:
            self.blocking = False
            raise _Wake()

    # --- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = BACKOFF_START
        while not self.stopping:
            try:
                self._cycle()
                backoff = BACKOFF_START
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                self.fetcher.reset_connection()
                self._outage(e, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except redis.ResponseError as e:
                # Redis refused the fetch (READONLY after a failover, OOM, MISCONF, BUSY).
                # This used to crash the worker, and each replacement crashed the same way.
                self._outage(e, backoff, "Redis refused a fetch")
                backoff = min(backoff * 2, BACKOFF_MAX)
            except _Wake:
                self.fetcher.reset_connection()
            if os.getppid() != self.master_pid:
                self.stopping = True

    def _outage(self, err: Exception, backoff: float, what: str = "Redis unreachable") -> None:
        if backoff == BACKOFF_START:
            log.error("%s (%s); retrying with backoff", what, err)
        self.writer.tick()
        time.sleep(backoff * (0.5 + random.random()))

    def _cycle(self) -> None:
        if self.held and time.monotonic() >= self.next_held_retry:
            self._write_held()
        jobs = self.fetcher.reserve(self.batch)
        if self.fetcher.bad_queues or self.fetcher.checked_all:
            self._check_queues()
        if not self.fetcher.registered:
            self._wait_for_registration()
            return
        if not jobs:
            self.batch = 1
            self.writer.tick()
            self.title.idle()
            # Not if TERM came while we blocked: the landed job stays in the landing list
            # and the master puts it back when we exit. On a loaded host a quiet worker
            # handled its TERM only after BLMOVE had landed a job pushed after the quiet.
            queue = self._idle_queue()
            landed = self._block(queue)
            if landed is None or self.stopping:
                return
            # Start it at once: the call that reserves it goes out now and its reply is read
            # when the job is done (fetch.py's header says why this is safe).
            self.fetcher.reserve_landed()
            jobs = [Reservation(b"", queue, landed)]
        started = time.monotonic()
        done = 0
        for res in jobs:
            if self.stopping:
                break  # told to stop: start nothing new; the master puts the rest back at the head
            self.process(res)
            done += 1
        self._adapt(len(jobs), done, time.monotonic() - started)

    def _idle_queue(self) -> str:
        """The queue to wait on: the first (in priority order) that no other idle worker waits
        on, else this slot's own. BLMOVE waits on one list, where Sidekiq's BRPOP waits on all
        of them; sharing the queues out keeps a push to any queue waking a worker at once
        while there are as many idle workers as queues. (For a job on a queue nobody waits on,
        the master wakes one of us: waker.py.)"""
        taken = self.watch.others(self.slot)
        for i in self._preference:
            if i not in taken:
                return self.fetcher.queues[i]
        return self.fetcher.block_queue

    def _block(self, queue: str) -> bytes | None:
        """Wait for a job on ``queue``; the payload that landed, or None (timed out, or woken
        by the master for a job on another queue: the next reserve looks at every queue)."""
        self.blocking = True
        try:
            if self.stopping:
                return None
            # The client id first, then the queue: the master wakes us by that id (slots.Watch)
            self.watch.set_client(self.slot, self.fetcher.connect())
            self.watch.set(self.slot, self.fetcher.queues.index(queue))
            return self.fetcher.block(queue, after_send=self._announce_idle)
        except redis.ResponseError as e:
            # The queue this worker blocks on has a key of the wrong type: BLMOVE fails at
            # once, every time. It used to crash the worker, and each replacement crashed the
            # same way. Wait as long as the block would have (a TERM still wakes us), so the
            # other queues are served by the reserve calls in between, without spinning.
            # (Other refusals go to _loop: logged once, backoff.)
            if "WRONGTYPE" not in str(e):
                raise
            self._bad_queue(queue)
            time.sleep(self.fetcher.block_seconds)
            return None
        finally:
            self.blocking = False
            self.watch.set(self.slot, None)

    def _wait_for_registration(self) -> None:
        """The master's registration is gone (reserve.lua took nothing): its lease expired
        and another master put back what it held. Reserving or blocking now would leave jobs
        where no master can recover them, so wait for the master to register again (its next
        heartbeat does), and say so once for the whole daemon."""
        if self.notes.due("unregistered", BAD_QUEUE_LOG_INTERVAL):
            log.warning("this master is not registered (its lease expired: frozen, or cut off "
                        "from Redis?); workers take no job until its next heartbeat "
                        "registers it again")
        self.batch = 1
        self.writer.tick()
        time.sleep(UNREGISTERED_NAP)

    def _announce_idle(self) -> None:
        """Tell the master this worker now blocks (one byte; a full pipe means the master has
        plenty to read already), so a job it saw land on a queue nobody watched then can be
        handed to us (waker.py)."""
        if self.idle_fd is not None:
            try:
                os.write(self.idle_fd, b"\0")
            except OSError:
                pass

    def _check_queues(self) -> None:
        """Log a queue whose key is not a list (reserve.lua skips it), once a minute for the
        whole daemon; and when a complete check finds it a list again, say so."""
        for name in self.fetcher.bad_queues:
            self._bad_queue(name)
        if self.fetcher.checked_all:
            for name in self.fetcher.queues:
                if name not in self.fetcher.bad_queues and self.notes.clear(("queue", name)):
                    log.info("queue %s: key %s is a list again; serving it", name,
                             self.keys.queue(name))

    def _bad_queue(self, name: str) -> None:
        if self.notes.due(("queue", name), BAD_QUEUE_LOG_INTERVAL):
            log.error("queue %s: key %s holds another Redis type, not a list (WRONGTYPE); "
                      "skipping this queue until the key is fixed, serving the others", name,
                      self.keys.queue(name))

    def _adapt(self, got: int, done: int, elapsed: float) -> None:
        if got == self.batch and done == got and elapsed < FAST_JOB * got:
            self.batch = min(self.batch * 2, self.config.prefetch)
        else:
            self.batch = 1

    # --- one job -------------------------------------------------------------------------------
    def process(self, res: Reservation) -> None:
        try:
            if len(res.payload) > self.config.max_payload_bytes:
                raise PayloadError(f"payload is {len(res.payload):,} bytes, over the "
                                   f"max_payload_bytes limit of {self.config.max_payload_bytes:,}")
            msg = codec.loads(res.payload)
            codec.validate(msg)
        except PayloadError as e:
            self._reject(res, e)
            return
        name, args, kwargs = msg["class"], msg["args"], {}
        if activejob.is_wrapped(msg):
            name, (args, kwargs) = activejob.job_name(msg), activejob.arguments(msg)
        cls = registry.lookup(name)
        self._release_finished(msg["class"])
        timeout = self._timeout(msg, cls)
        self.writer.begin(msg["jid"], res.queue, codec.job_class_name(msg), timeout)
        self.title.busy(codec.job_class_name(msg))
        start = time.monotonic()
        job, error = None, None
        try:
            if cls is None:
                raise UnknownJobClass(f"uninitialized constant {name}: no job class "
                                      f"named {name!r} is registered in this process")
            job = cls()
            job.jid, job.queue, job.msg = msg["jid"], res.queue, msg
            with job_timeout(timeout, f"{msg['class']} (jid {msg['jid']})"):
                server_middleware.invoke(job, msg, res.queue, lambda: job.perform(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - JobTimeout and SystemExit fail the job too
            error = e
        elapsed = time.monotonic() - start
        self._learn(msg["class"], elapsed)
        if error is None:
            claimed = self._claimed(res, True)
            if claimed is not None:
                self.fetcher.ack(claimed)
            self._hook(job, "after_succeeded")
            if self.config.job_logging:
                self.joblog.done(msg["class"], msg["jid"], elapsed)
        else:
            self._failed(res, msg, cls, error, elapsed)
            self._hook(job, "after_failed", error)
        self.writer.end(error is not None)

    def _release_finished(self, job_class: str) -> None:
        """Before a job that may run long, write the acks of the batch's finished jobs (one
        send, no wait), so they are not held reserved (and run again if this worker dies)
        while it runs. Before a job known to be short they ride with the batch's next
        reserve call instead: one write less per job is most of a short job's overhead."""
        if self._durations.get(job_class, SLOW_JOB) >= SLOW_JOB:
            self.fetcher.send_acks()

    def _learn(self, job_class: str, elapsed: float) -> None:
        """How long jobs of a class take: jumps up at once, decays slowly."""
        known = self._durations.get(job_class)
        self._durations[job_class] = (elapsed if known is None or elapsed > known
                                      else 0.9 * known + 0.1 * elapsed)

    def _timeout(self, msg: dict, cls) -> float | None:
        value = msg.get("timeout")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        if cls is not None:
            if cls not in self._class_timeouts:  # options are fixed once the class exists
                value = cls.get_options().get("timeout")
                self._class_timeouts[cls] = float(value) if value else None
            if self._class_timeouts[cls]:
                return self._class_timeouts[cls]
        return self.config.job_timeout

    def _hook(self, job, name: str, *args) -> None:
        if job is None:
            return
        try:
            getattr(job, name)(*args)
        except Exception:  # noqa: BLE001 - a broken hook must not fail a finished job
            log.exception("class=%s jid=%s %s hook raised", type(job).__name__, job.jid, name)

    def _failed(self, res: Reservation, msg: dict, cls, error: BaseException,
                elapsed: float) -> None:
        outcome = retry.decide(msg, error, res.queue, job_class=cls,
                               max_retries=self.config.max_retries)
        # The traceback helps with a bug in the job; for a timeout or an unknown class the
        # one line says everything.
        trace = None if isinstance(error, (JobTimeout, UnknownJobClass)) else error
        log.warning("class=%s jid=%s elapsed=%.3f fail: %s: %s -> %s", msg["class"], msg["jid"],
                    elapsed, type(error).__qualname__, error, outcome.kind, exc_info=trace)
        events.report(error, {"job": msg, "queue": res.queue, "outcome": outcome.kind})
        self._record(res, outcome.kind, outcome.score, outcome.payload)

    def _reject(self, res: Reservation, err: PayloadError) -> None:
        """A queue element that is not a usable job goes to dead as it came, with the reason
        logged (Sidekiq does the same for invalid JSON): nothing is dropped."""
        log.error("queue=%s unusable payload sent to dead: %s: %.200r", res.queue, err,
                  res.payload)
        self.writer.begin("", res.queue, "?", None)
        self._record(res, "dead", time.time(), res.payload)
        self.writer.end(True)

    def _claimed(self, res: Reservation, succeeded: bool) -> Reservation | None:
        """The reservation to ack or fail: a job started as it landed gets it only now."""
        return res if res.member else self.fetcher.claim(res.payload, succeeded)

    def _record(self, res: Reservation, kind: str, score: float, data) -> None:
        """Write a failure; during a Redis outage keep trying (the job stays reserved until
        this succeeds, and the master requeues it if we exit first)."""
        claimed = self._claimed(res, False)
        if claimed is None:
            return  # not confirmed as ours: it is handed out again and runs again
        res = claimed
        backoff = BACKOFF_START
        while True:
            try:
                written = self.fetcher.fail(res, kind, score, data)
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                if self.stopping:
                    raise
                self._outage(e, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
        if written == REFUSED:
            self._hold(res, kind, score, data)
        elif written == GONE:
            # Its reservation was gone: another master put the job back after this master's
            # lease expired (frozen, or cut off from Redis). Writing the failure too would keep
            # it in two places; it runs again from its queue.
            log.warning("a failed job's reservation was gone (recovered after a lease expiry); "
                        "its failure is not recorded, it runs again")

    def _hold(self, res: Reservation, kind: str, score: float, data) -> None:
        """The failure's target key holds another Redis type: the job stays reserved (marked,
        so it is not handed out again) and the write is tried again every HELD_RETRY seconds.
        If this worker exits first, the master puts the job back in its queue."""
        self.held.append((res, kind, score, data))
        if not self.next_held_retry:
            self.next_held_retry = time.monotonic() + HELD_RETRY
        target = "retry" if kind == "retry" else "dead"
        if self.notes.due(("key", target), BAD_QUEUE_LOG_INTERVAL):
            log.error("key %s holds another Redis type, not a sorted set (WRONGTYPE): failed "
                      "jobs stay reserved until it is fixed (%d held by worker %d)",
                      getattr(self.keys, target), len(self.held), self.slot)

    def _write_held(self) -> None:
        held, self.held, self.next_held_retry = self.held, [], 0.0
        for i, (res, kind, score, data) in enumerate(held):
            try:
                written = self.fetcher.fail(res, kind, score, data)
            except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
                self.held.extend(held[i:])  # the loop's outage handling takes it from here
                self.next_held_retry = time.monotonic() + HELD_RETRY
                raise
            if written == REFUSED:
                self._hold(res, kind, score, data)
            else:
                log.info("the failure of a held job (%s) is written now", kind)


def _idle_preference(config) -> list[int]:
    """Queue indexes in the order idle workers take them to wait on: strict order as listed,
    weighted order by weight (heaviest first, ties as listed)."""
    names = config.queue_names
    if config.strict:
        return list(range(len(names)))
    weight = dict.fromkeys(names, 0)
    for name, w in config.queues:  # as weighted_queues counts them: max(w, 1) each
        weight[name] += max(w, 1)
    return sorted(range(len(names)), key=lambda i: -weight[names[i]])
