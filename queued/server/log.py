"""Logging: one line per event on stderr (or a file), UTC timestamps, Sidekiq's shape:
``2026-11-21T06:14:56.123Z pid=4242 tid=w3 class=HardJob jid=15acda24 INFO app.billing: msg``.

``tid`` is ``master``, ``w<slot>``, or ``w<slot>-<lane>`` for a job thread (or an async job's
lane) of a worker that runs many jobs at once. While a job runs, every line logged in its
thread or its asyncio task (by queued or by the job's own code, through ``logging``) carries
the job's class and jid, as Sidekiq's job context does; the line that ends a job adds
``elapsed``. The context is a ``contextvars.ContextVar``: per thread and per asyncio task, so
jobs running at once in one process never see each other's (a thread the job code starts
itself begins with no context, as in Sidekiq, whose job context is thread-local). Every line names
its logger. ``-v`` turns on queued's own debug lines; other libraries' loggers (redis-py's
among them) stay at WARNING.

The line a worker logs at the end of every job (``job_logging``, on by default as in Sidekiq)
is written by ``JobLog`` without the logging module's machinery (a LogRecord, the handler's
lock, the formatter, a flush per record: ~13 us a line here, a third of a no-op job's cost in
an outside run): it formats the same text itself, and the lines of a worker's batch of jobs go
out together in one write: in a worker of one job at a time when the batch ends; in a worker
of many jobs at once before the dispatcher waits and at MAX_PENDING lines; in both before any
other line (so the order holds), and before any ack goes out (the worker's fetcher asks:
``before_ends``), a job's line being made before its ack is queued, so a job whose ack has
gone out has its line written (a kill -9 loses the lines of the jobs it also runs again, no
other: RT9, RT12). A write is a system call and wakes whoever reads the log (journald, a
pipe): one per job cost ~10 % of a no-op job's throughput by itself. It does so only while
queued's own handler is the one in place; with any other logging setup it goes through
``logging`` like every other line. A worker of many jobs at once writes through
``LaneJobLog``: its lines end on several threads, each in its lane. In a worker of one job at
a time only the worker's thread makes lines, without a lock, but any thread may write them
(a line logged on a thread of the job's own flushes them first): the held lines are taken
under the handler's lock, and only those taken are removed (RT12).

``log_format: json`` writes one JSON object per line instead, for log shippers: ``time``,
``level``, ``logger``, ``pid``, ``tid``, ``slot`` (null in the master), and while a job runs its
``jid``, ``class``, ``queue`` (and ``elapsed`` on the line that ends it), then ``message``; a
line with an exception adds ``error_class``, ``error_message`` and ``traceback``. The job's
fields are kept apart from the text form only in that mode, so text mode pays nothing for it.
"""
from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import sys
import time
from math import floor

from .tracebacks import format_exception

#: Loggers of other libraries that stay at WARNING whatever -v says (redis-py logs every
#: connection's handshake at DEBUG).
QUIET_LIBRARIES = ("redis", "urllib3", "asyncio")

FORMATS = ("text", "json")

# A job's fields (job_context) while it runs in this thread or task; "" between jobs.
_context: contextvars.ContextVar[str | tuple] = contextvars.ContextVar("queued_job_context",
                                                                      default="")
# "-<lane>" in a job thread (or an async job's task) of a worker of many jobs at once.
_lane: contextvars.ContextVar[str] = contextvars.ContextVar("queued_lane", default="")


def _fields_json(job: tuple) -> str:
    """What a job's context adds to a json line: ``,"jid":...,"class":...[,"queue":...]
    [,"elapsed":...]`` (a field that is None is left out); elapsed with 6 decimals."""
    jid, job_class, queue, elapsed = job
    text = f',"jid":{_jstr(jid)},"class":{_jstr(job_class)}'
    if queue is not None:
        text += f',"queue":{_jstr(queue)}'
    if elapsed is not None:
        text += f',"elapsed":{elapsed:.6f}'
    return text


def _text(job: tuple) -> str:
    """A job's context (job_context) as text mode writes it."""
    jid, job_class, _, elapsed = job
    text = f" class={job_class} jid={jid}"
    return text if elapsed is None else f"{text} elapsed={elapsed:.3f}"


def set_context(context: str) -> None:
    """The job context of this thread or asyncio task (``job_context``; "" between jobs)."""
    _context.set(context)


def set_lane(lane: int) -> None:
    """Name this thread (or asyncio task) as lane ``lane`` of its worker in ``tid``."""
    _lane.set(f"-{lane}" if lane else "")


def job_context(job_class: str, jid: str, elapsed: float | None = None,
                queue: str | None = None) -> tuple:
    """The context of a job's lines: its fields, (jid, class, queue, elapsed), made into text
    only if a line is written (`` class=X jid=Y[ elapsed=Z]`` in text mode, _text; json
    fields in json mode, _fields_json): most contexts never are (issue 18)."""
    return (jid, job_class, queue, elapsed)


#: Done lines a worker of many jobs at once holds at most before they go out anyway (its
#: dispatcher may run long between waits). A worker of one job at a time holds a batch's at
#: most, and writes them whenever its acks go out (every 20 ms in a long batch: ACK_AFTER), so
#: it does not count them per line (~290 instructions, 6 % of a line: issue 18).
MAX_PENDING = 64
#: ".000Z" ... ".999Z": a time's milliseconds as a line writes them (an index, not a format)
_MILLIS = tuple(f".{i:03d}Z" for i in range(1000))
#: "0.000" ... "0.999": a job's elapsed time under a second as a done line writes it
_ELAPSED = tuple(f"0.{i:03d}" for i in range(1000))


@functools.cache
def _ends(structured: bool, name: str) -> tuple[str, ...]:
    """A done line's ends, from its elapsed time on, by the time's index: in text the
    milliseconds (`` elapsed=0.012 INFO queued.worker: done``), in json the microseconds after
    the milliseconds (``346,"message":"done"}``); newline included."""
    if structured:
        return tuple(f'{i:03d},"message":"done"}}\n' for i in range(1000))
    return tuple(f" elapsed={elapsed} INFO {name}: done\n" for elapsed in _ELAPSED)


class Formatter(logging.Formatter):
    def __init__(self, tag: str = ""):
        super().__init__()
        self.tid = tag
        self._second = -1.0  # the second _text names (a float: see stamp)
        self._text = ""

    def formatTime(self, record, datefmt=None):  # noqa: N802 - logging's API
        return self.stamp(record.created)

    def stamp(self, created: float) -> str:
        """``2026-11-21T06:14:56.123Z``: the seconds formatted once a second (strftime is
        slow), the milliseconds looked up. Float arithmetic on purpose: an epoch is a
        two-digit int for CPython, whose operations take its slow path (issue 18: a float's
        ``% 1``, the ints and a format were a third of the cost of a done line)."""
        fraction = created - self._second
        if not 0.0 <= fraction < 1.0:
            second = int(created)
            self._second = float(second)
            self._text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            fraction = created - self._second
        return self._text + _MILLIS[int(fraction * 1000)]

    def prefix(self, created: float, pid: int) -> str:
        """Everything before the level: time, pid, tid and the job context."""
        context = _context.get()
        if context.__class__ is tuple:  # (a job's: job_context)
            context = _text(context)
        return f"{self.stamp(created)} pid={pid} tid={self.tid}{_lane.get()}{context}"

    def format(self, record):
        text = (f"{self.prefix(record.created, record.process)} {record.levelname} "
                f"{record.name}: {record.getMessage()}")
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + format_exception(record.exc_info[1])
        elif record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text

    def line(self, created: float, pid: int, level: str, name: str, message: str) -> str:
        """One record as written (without the newline), made without a LogRecord."""
        return f"{self.prefix(created, pid)} {level} {name}: {message}"


class JsonFormatter(Formatter):
    """``log_format: json``: one object per line (see the module header), put together as
    text in its key order, each value JSON-encoded: a dict through json.dumps cost five
    times as much as a no-op job's own done line (issue 18)."""

    def head(self, created: float, pid: int, level: str, name: str) -> str:
        """``{"time":...,"level":...,"logger":...,"pid":...,"tid":...,"slot":...`` (and
        ``"thread"``, and the job's fields while one runs), without the message."""
        lane = _lane.get()
        text = f'{{"time":"{self.stamp(created)}"{self.middle(pid, level, name, lane)}'
        context = _context.get()
        if context.__class__ is tuple:
            text += _fields_json(context)
        return text

    def middle(self, pid: int, level: str, name: str, lane: str) -> str:
        """``,"level":...,"logger":...,"pid":...,"tid":...,"slot":...[,"thread":N]``."""
        tid = self.tid
        slot = tid[1:] if tid[1:].isdigit() else "null"
        text = (f',"level":{_jstr(level)},"logger":{_jstr(name)},"pid":{pid},'
                f'"tid":{_jstr(tid + lane)},"slot":{slot}')
        return f'{text},"thread":{int(lane[1:])}' if lane else text

    def line(self, created: float, pid: int, level: str, name: str, message: str,
             exc: BaseException | None = None) -> str:
        text = f'{self.head(created, pid, level, name)},"message":{_jstr(message)}'
        if exc is not None:
            text += (f',"error_class":{_jstr(type(exc).__qualname__)},'
                     f'"error_message":{_jstr(str(exc))},'
                     f'"traceback":{_jstr(format_exception(exc))}')
        return text + "}"

    def format(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return self.line(record.created, record.process, record.levelname, record.name,
                         record.getMessage(), exc)


def _jstr(text) -> str:
    """A JSON string, non-ASCII written as it is (json.dumps(ensure_ascii=False)); a value
    that is not a str as json.dumps(default=str) writes it."""
    if text.__class__ is not str:
        text = str(text)
    return _encode_str(text)


_encode_str = json.encoder.encode_basestring


class _Pending:
    """Mixed into queued's handler: job lines JobLog made wait in ``pending`` until the
    worker's batch ends (``flush_pending``) or another record comes (written first, so the
    order holds), then go out in one write."""

    pending: list[str]

    def flush_pending(self) -> None:
        """Write the held lines (under the handler's lock: its callers hold it). Only the
        lines taken are removed: a worker of one job at a time appends without the lock,
        and a line added meanwhile stays for the next write. A character UTF-8 cannot
        encode (a lone surrogate) is written as its escape, as stderr's logging writes it."""
        pending = self.pending
        taken = pending[:]
        if not taken:
            return
        del pending[:len(taken)]
        data = "".join(taken).encode("utf-8", "backslashreplace")
        fd = self.stream.fileno()
        while data:
            data = data[os.write(fd, data):]

    def emit(self, record):
        if self.pending:
            try:
                self.flush_pending()
            except (OSError, ValueError):
                self.pending.clear()
        super().emit(record)


class StreamHandler(_Pending, logging.StreamHandler):
    def __init__(self, stream=None):
        super().__init__(stream)
        self.pending = []


class FileHandler(_Pending, logging.FileHandler):
    def __init__(self, filename):
        super().__init__(filename)
        self.pending = []


def setup(level: str = "INFO", logfile: str | None = None, tag: str = "master",
          log_format: str = "text") -> None:
    """queued's one handler on the root logger; ``level`` DEBUG (-v) applies to queued's
    own loggers, the root stays at INFO and other libraries at WARNING."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = FileHandler(logfile) if logfile else StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(tag) if log_format == "json" else Formatter(tag))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("queued").setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def retag(tag: str) -> None:
    """After fork: the same handlers, a worker's tid."""
    for h in logging.getLogger().handlers:
        if isinstance(h.formatter, Formatter):
            h.formatter.tid = tag


def reopen() -> None:
    """Reopen the log file (``logfile:``) after logrotate moved it away (USR2). Call it from
    the main loop, not from a signal handler: it takes the handler's lock."""
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            h.acquire()
            try:
                if isinstance(h, _Pending):
                    h.flush_pending()
                if h.stream is not None:
                    h.stream.close()
                h.stream = h._open()
            finally:
                h.release()


#: Seconds direct_fd waits for the handler's lock before it writes without flushing first.
FLUSH_PATIENCE = 0.2


def direct_fd() -> tuple[int, Formatter] | None:
    """The file descriptor and formatter of queued's own handler when it is the only one (a
    line written there directly looks like any other); else None."""
    handler = own_handler()
    if handler is None:
        return None
    try:
        fd = handler.stream.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a file descriptor
        return None
    # What the stream buffers goes out first, so the order holds; under the handler's lock,
    # if it can be had soon: a lock left held for ever (a thread stopped inside a record) must
    # not stop the record that says so (rt2 finding 2: the watchdog's and TTIN's hung here).
    lock = handler.lock
    if lock is not None and lock.acquire(timeout=FLUSH_PATIENCE):
        try:
            handler.stream.flush()
        except (AttributeError, OSError, ValueError):
            return None
        finally:
            lock.release()
    return fd, handler.formatter


def own_handler() -> _Pending | None:
    """queued's handler (setup), when it is the root logger's only one."""
    handlers = logging.getLogger().handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if not isinstance(handler, _Pending) or type(handler.formatter) not in (
            Formatter, JsonFormatter) or handler.filters:
        return None
    return handler


def write_record(level: str, name: str, message: str) -> None:
    """One record written in one ``os.write`` when that is possible (see ``direct_fd``), else
    through logging: for a signal handler, which must not take the handler's lock (the main
    thread may hold it in the middle of a line). A multi-line message stays in one piece."""
    direct = direct_fd()
    if direct is None:
        logging.getLogger(name).log(getattr(logging, level), "%s", message)
        return
    fd, formatter = direct
    line = formatter.line(time.time(), os.getpid(), level, name, message) + "\n"
    try:
        os.write(fd, line.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def pid_tag(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while pid:
        pid, d = divmod(pid, 36)
        out = digits[d] + out
    return out or "0"


class JobLog:
    """The ``done`` line of every finished job (see the module header). ``bind()`` after the
    handlers are final (in the worker, after fork, and after a reopen); ``flush()`` when the
    worker's batch ends."""

    def __init__(self, name: str = "queued.worker"):
        self.logger = logging.getLogger(name)
        self.handler: _Pending | None = None
        self.formatter: Formatter | None = None
        self.tail = f" INFO {name}: done\n"
        self.name = name
        self.structured = False
        self.pid = os.getpid()
        self.middle = ""      # what follows the time, up to the lane (see bind)
        self._class: str | None = None  # the class and queue _class_text is for
        self._queue: str | None = None
        self._class_text = ""
        self._ends: tuple[str, ...] = ()  # a line's ends by elapsed time (see bind)
        # A line's head (its time to the millisecond, pid, tid and lane) is kept while the
        # clock reads within [_lo, _hi), where it is the same text (see _head).
        self._lo = self._hi = 0.0
        self._head_text = ""
        self._head_lane = ""
        # The second a head names, as text: JobLog's own, not the handler's formatter's, which
        # other threads' records use under the handler's lock (JobLog makes lines without
        # it: sharing it gave lines a second off, and an IndexError that killed the worker,
        # RT13)
        self._seconds = Formatter()

    def bind(self) -> None:
        """Write directly when queued's own handler is the only one and INFO lines of this
        logger would be written; else use logging. (A worker of many jobs at once binds again
        after a log reopen, USR2, while its job threads write lines: what a line reads is set
        before the handler, and the handler is never cleared on the way, so a line is made with
        the binding before or the one after. Clearing it first lost lines: RT10.)"""
        pid = os.getpid()
        handler = own_handler()
        if handler is None or direct_fd() is None or not self.logger.isEnabledFor(logging.INFO) \
                or handler.level > logging.INFO or not self._plain(self.logger):
            self.handler, self.pid = None, pid
            return
        formatter = handler.formatter
        structured = isinstance(formatter, JsonFormatter)
        self.middle = (formatter.middle(pid, "INFO", self.name, "") if structured
                       else f" pid={pid} tid={formatter.tid}")
        self._ends = _ends(structured, self.name)
        self.formatter, self.structured, self.pid = formatter, structured, pid
        self._hi = 0.0  # (the head and the class's text are made anew: the format may differ)
        self._class = None
        self.handler = handler

    @staticmethod
    def _plain(logger: logging.Logger) -> bool:
        """No filter or handler of its own between this logger and the root's handler."""
        while logger is not None and logger.name != "root":
            if logger.filters or logger.handlers or not logger.propagate:
                return False
            logger = logger.parent
        return True

    def done(self, shown: str, jid: str, elapsed: float, res) -> None:
        """Log ``done`` for a job that ended: the class it shows, its jid (as it started: read
        from its payload, or derived_jid's), its run time, and its reservation (``res.queue``,
        the queue it came from; ``res.payload``, the bytes its jid was read from). Bound (see
        bind), the line is made as the handler's formatter would write it, in one f-string:
        its head (kept while the millisecond it names lasts: _head), the class's text (kept
        while the class, and in json the queue, repeat: _keep_class), the jid, and the end of
        the line from the elapsed time (looked up: _ends), and held (see _Pending). Each
        method call, argument tuple, branch and format was measured in instructions (issue
        18): this is a worker of one job at a time's, with no lock and no lane (LaneJobLog
        adds them). (One method of the class, not one put in the instance by bind: a call
        through an instance's attribute missed the interpreter's cache, ~600 instructions a
        line.)"""
        handler = self.handler
        if handler is None:
            self._logged(shown, jid, elapsed, res.queue)
            return
        now = time.time()
        if self._lo <= now and now < self._hi:  # (not chained: three dispatches fewer)
            head = self._head_text
        else:
            head = self._head(now)
        # (a table's entry is what :.3f, or json's :.6f, writes unless the time is within a
        # millionth of a unit of a tie, which the format decides on the float's exact value,
        # or is negative, as a faked monotonic clock stepped back makes it: RT11)
        pending = handler.pending
        if self.structured:
            if shown != self._class or res.queue != self._queue:
                self._keep_class(shown, res.queue)
            # A payload without a backslash had no escape in any string: its jid, read from
            # it (or made by derived_jid, hex), is the text between its quotes, which holds
            # no '"' and, its parser being strict, no control character: JSON's text of it
            # (escaping each jid was an eighth of a json line's cost). 92 is the backslash:
            # a bytes test of an int is a memchr, of b"\\" a TypeError raised and cleared.
            if 92 in res.payload:
                jid = _encode_str(jid)[1:-1]
            scaled = elapsed * 1e6 + 0.5
            run = floor(scaled)  # (math.floor: a call int() is not cached for)
            # (the head ends in ',"jid":"', the class's text starts with the jid's '"')
            if 0.0 <= elapsed and run < 1_000_000 and scaled - run > 1e-6:
                pending.append(f"{head}{jid}{self._class_text}"
                               f"{_ELAPSED[run // 1000]}{self._ends[run % 1000]}")
            else:
                pending.append(f'{head}{jid}{self._class_text}{elapsed:.6f},"message":"done"}}\n')
        else:
            if shown != self._class:
                self._keep_class(shown, None)
            scaled = elapsed * 1000.0 + 0.5
            run = floor(scaled)
            if 0.0 <= elapsed and run < 1000 and scaled - run > 1e-6:
                pending.append(f"{head}{self._class_text}{jid}{self._ends[run]}")
            else:
                pending.append(f"{head}{self._class_text}{jid} elapsed={elapsed:.3f}"
                               f"{self.tail}")

    def _logged(self, shown: str, jid: str, elapsed: float, queue: str | None) -> None:
        """Through logging (another handler, a filter, or INFO off: see bind)."""
        set_context(job_context(shown, jid, elapsed, queue))
        self.logger.info("done")

    def _head(self, now: float) -> str:
        """What a line written at ``now`` in its lane (``_head_lane``) starts with: in text its
        time, pid, tid and lane; in json ``{"time":...`` to the lane's fields and ``"jid":"``
        (every done line's next field). Kept for the clock's readings from ``now`` to a
        microsecond before the millisecond's end: the text is a function of the reading, and
        in that span ``int((t - second) * 1000)`` is the same for every t (the subtraction is
        exact and both steps keep order; the microsecond is four times the rounding of an
        epoch float; a clock stepped back goes below ``now``, outside)."""
        formatter, clock = self.formatter, self._seconds
        fraction = now - clock._second
        if not 0.0 <= fraction < 1.0:
            clock.stamp(now)  # (the second's text made anew)
            fraction = now - clock._second
        millis = int(fraction * 1000)
        stamp = clock._text + _MILLIS[millis]
        lane = self._head_lane
        if self.structured:
            middle = self.middle if not lane else formatter.middle(
                self.pid, "INFO", self.name, lane)
            head = f'{{"time":"{stamp}"{middle},"jid":"'
        else:
            head = f"{stamp}{self.middle}{lane}"
        self._head_text = head
        self._lo, self._hi = now, clock._second + (millis + 1) / 1000 - 1e-6
        return head

    def _keep_class(self, shown: str, queue: str | None) -> None:
        """The text a line has between the jid and the elapsed time (json: from the jid's
        closing quote to ``"elapsed":``) or before the jid (text: `` class=X jid=``), kept
        while the class and queue repeat (a batch is mostly of one class)."""
        if self.structured:
            text = f'","class":{_jstr(shown)}'
            if queue is not None:
                text += f',"queue":{_jstr(queue)}'
            text += ',"elapsed":'
        else:
            text = f" class={shown} jid="
        self._class_text, self._class, self._queue = text, shown, queue

    def flush(self) -> None:
        """Write the lines held (one write). On an error logging takes over from now on."""
        handler = self.handler
        if handler is not None:
            self._flush(handler)

    def _flush(self, handler) -> None:
        """(Under the handler's lock, as its emit() writes them from any thread.)"""
        handler.acquire()
        try:
            handler.flush_pending()
        except (OSError, ValueError):
            handler.pending.clear()
            self.use_logging()
        finally:
            handler.release()

    def use_logging(self) -> None:
        """Through logging from now on (queued's handler failed to write; until bind)."""
        self.handler = None


class LaneJobLog(JobLog):
    """The done lines of a worker of many jobs at once: jobs end on several threads, each in
    its lane (set_lane), so the held lines, the head and the class's text kept are touched
    under the handler's lock, as its own emit() does, and a line's head is made anew when
    its lane is not the last line's."""

    def done(self, shown: str, jid: str, elapsed: float, res) -> None:
        handler = self.handler
        if handler is None:
            self._logged(shown, jid, elapsed, res.queue)
            return
        handler.acquire()
        try:
            lane = _lane.get()
            if lane != self._head_lane:
                self._head_lane, self._hi = lane, 0.0
            JobLog.done(self, shown, jid, elapsed, res)
            if len(handler.pending) >= MAX_PENDING:
                self._flush(handler)
        finally:
            handler.release()
