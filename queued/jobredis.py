"""The job code's Redis client in a worker of one job at a time (``queued.get_redis()``).

A worker runs one job at a time, so the job needs one connection, not a pool: after fork each
such worker swaps the default client's redis-py client for a ``JobRedis`` of the same settings
with ``single_connection_client=True`` (``dedicated``; client.dedicate_job_connection calls it).

A plain command then takes a short path (``JobRedis.execute_command``): its arguments packed by
hiredis, one write, one read of the reply on that connection, the command's response callback.
redis-py 8's own path for the same command costs ~3x the instructions (87,000 for an INCR,
against ~30,000; docs/benchmarks.md): its packer checks every argument's type in generator
expressions, and each call records metrics, builds closures for its retry and failure handlers
and formats the server's address for an error it may never raise. For a job that does little
besides a Redis command or two, that was the largest part of what it cost (issue 18).

What the short path keeps of redis-py's: the same bytes on the wire (arguments encoded as its
Encoder encodes them), the same replies and errors (the command's response callback; an error
reply raises the same ResponseError subclass), the connection's retry policy (a broken
connection is dropped, and the command sent again on a new one if and as the policy says; a
Sentinel-managed connection asks the Sentinels where the master is as it reconnects, and takes
a READONLY reply from a demoted master for a broken connection, as redis-py's does), and the
connection's lock (threads a job starts share the connection one command at a time). Anything
else goes to redis-py's own path unchanged: a command with options other than ``keys`` (which
only client-side caching reads), an argument that is not str, bytes, int or float (redis-py
raises DataError for a bool or None), a command name that is not all ASCII letters (redis-py
splits one at whitespace: JSON.SET goes its way too), and every command of a client whose
protocol was set explicitly, or set up for client-side caching, health checks, or without
hiredis (short_path_for). Pipelines, Pub/Sub, locks and scripts are redis-py's, as before.

Before each command one poll tells whether the server closed the connection while it idled (a
Redis restart, CLIENT KILL, its idle timeout): the command then goes on a new connection
instead of failing the job, since a client redis-py 8 makes from a URL does not retry. (This
probe used to sit in the connection's send, where redis-py 8.2's handshake, which sends its
commands before reading any reply, set it off: each worker's connect looped for seconds.) A
reply left unread (a job's time limit raised between the write and the read) is never read as
the next command's: the connection is dropped on any exception.
"""
from __future__ import annotations

import os
import select
import socket
import sys
from typing import Any, Callable

import redis as redis_lib
from redis.connection import Connection
from redis.client import CaseInsensitiveDict as _CALLBACKS
from redis.exceptions import ResponseError

from .connection import PACKED_AS_IS, hiredis_pack as _hiredis_pack, hiredis_packs

#: Argument types hiredis packs as they are for an encoder that is not UTF-8 strict (its str
#: arguments _pack_slowly encodes first; for a UTF-8 strict one: connection.PACKED_AS_IS). A
#: float is always encoded first, with repr as the Encoder does (hiredis 3.5 writes the same
#: text, but no hiredis version promises it).
_BYTES = frozenset((bytes, int))
_dict_get = dict.get


class JobRedis(redis_lib.Redis):
    """A single-connection redis-py client with a short path for plain commands."""

    #: (encoding, errors) of its encoder when its connection suits the short path
    #: (``short_path_for``), else None: every command goes to redis-py's own path.
    short_path: tuple[str, str] | None = None
    _passed: frozenset = _BYTES  # argument types packed as they are (see _BYTES)
    _read: Callable[[Any], Any] = None  # a reply off the connection (_reader)
    _polled: socket.socket | None = None  # the socket _poller watches
    _poller: Any = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if self.short_path is None or (options and (len(options) > 1 or "keys" not in options)):
            return super().execute_command(*args, **options)
        packed = self._pack(args)
        if packed is None:
            return super().execute_command(*args, **options)
        conn = self.connection
        read = self._read
        with self.single_connection_lock:
            sock = conn._sock
            if sock is not None and self._closed_while_idle(sock):
                conn.disconnect()
                sock = None
            if sock is None:  # (dropped: connected as redis-py connects, then sent)
                response = _retried(conn, packed, read, None)
            else:
                try:
                    _send(sock, packed)
                except BaseException as e:  # noqa: BLE001 - the connection goes with any error
                    conn.disconnect()
                    response = _retried(conn, packed, read, _as_redis_error(e, conn, True))
                else:
                    try:
                        response = read(conn)
                    except ResponseError:
                        raise  # (an error reply, read whole: the connection is in step)
                    except BaseException as e:  # noqa: BLE001 - as above
                        conn.disconnect()
                        response = _retried(conn, packed, read,
                                            _as_redis_error(e, conn, False))
        if isinstance(response, ResponseError):  # (the parser returns error replies)
            raise response
        callbacks = self.response_callbacks
        # (redis-py's CaseInsensitiveDict keeps its keys upper-cased: read as its own get()
        # reads, without that Python method's call; any other mapping through its get)
        callback = (_dict_get(callbacks, args[0].upper()) if callbacks.__class__ is _CALLBACKS
                    else callbacks.get(args[0]))
        return response if callback is None else callback(response)

    def _closed_while_idle(self, sock: socket.socket) -> bool:
        """True if the socket is readable between two commands: the server closed it, or
        sent what nobody asked for. One poll, on a poll object kept while the socket lives."""
        if sock is not self._polled:
            self._poller = select.poll()
            self._poller.register(sock, select.POLLIN)
            self._polled = sock
        return bool(self._poller.poll(0))

    def _pack(self, args: tuple) -> bytes | None:
        """The command as redis-py's Encoder would write it, in one buffer; None for anything
        the short path leaves to redis-py (connection.hiredis_packs says what hiredis packs)."""
        if hiredis_packs(args, self._passed):
            return _hiredis_pack(args)
        return self._pack_slowly(args) if hiredis_packs(args[:1]) else None

    def _pack_slowly(self, args: tuple) -> bytes | None:
        """A command of a plain name whose arguments are encoded here first: a float, or
        a str of an encoder that is not UTF-8 strict."""
        encoding, errors = self.short_path
        out = [args[0].encode()]
        for arg in args[1:]:
            kind = arg.__class__
            if kind is str:
                out.append(arg.encode(encoding, errors))
            elif kind is bytes:
                out.append(arg)
            elif kind is int or kind is float:
                out.append(repr(arg).encode())
            else:  # (bool, None, bytearray, memoryview, subclasses: redis-py's own rules)
                return None
        return _hiredis_pack(tuple(out))


def _send(sock: socket.socket, packed: bytes) -> None:
    """``sock.sendall(packed)`` in one system call: a socket with a timeout (redis-py's
    default: 5 s) polls before each send, and a command fits the send buffer but for a huge
    one, whose rest goes through sendall. (A TLS socket's bytes are its own: sendall.)"""
    if sock.__class__ is not socket.socket:
        sock.sendall(packed)
        return
    try:
        sent = os.write(sock.fileno(), packed)
    except BlockingIOError:
        sent = 0
    if sent < len(packed):
        sock.sendall(memoryview(packed)[sent:])


def _as_redis_error(error: BaseException, conn: Any, writing: bool) -> BaseException:
    """An error of a socket call as redis-py's connection raises it (a timeout, a broken
    connection, with redis-py's words); any other exception as it is."""
    if not isinstance(error, OSError):
        return error
    if writing:
        if isinstance(error, socket.timeout):
            return redis_lib.TimeoutError("Timeout writing to socket")
        return redis_lib.ConnectionError(
            f"Error {error.errno if error.errno is not None else 'UNKNOWN'} while writing to "
            f"socket. {error.strerror or error}.")
    where = conn._host_error() if hasattr(conn, "_host_error") else "the socket"
    if isinstance(error, socket.timeout):
        return redis_lib.TimeoutError(f"Timeout reading from {where}")
    return redis_lib.ConnectionError(f"Error while reading from {where} : {error.args}")


def _retried(conn: Any, packed: bytes, read: Callable[[Any], Any],
             first: BaseException | None) -> Any:
    """The command under the connection's retry policy, as redis-py runs it: ``first`` (the
    short path's error, the connection already dropped) counts as its first failed try, so a
    policy that does not retry it (any error, for a client made from a URL; a timeout, for a
    Sentinel's) raises it, and one that does sends the command again on a new connection."""
    pending = [first] if first is not None else []

    def attempt() -> Any:
        if pending:
            raise pending.pop()
        try:
            conn.send_packed_command([packed], check_health=False)  # (connects first)
            return read(conn)
        except ResponseError:
            raise
        except BaseException as e:  # noqa: BLE001 - as execute_command
            conn.disconnect()
            raise _as_redis_error(e, conn, False) from e

    return conn.retry.call_with_retry(attempt, lambda error: conn.disconnect())


def _parser_read(conn: Any) -> Any:
    return conn._parser.read_response()


def _connection_read(conn: Any) -> Any:
    return conn.read_response()


def _hiredis_read(not_enough: object) -> Callable[[Any], Any]:
    """A reply read with the parser's own hiredis reader and buffer, as its read_response
    reads one (RESP2: no push messages): an error reply returned as a value, one that means a
    lost connection (LOADING, say) raised. Its two Python layers were a fifth of a command."""
    def read(conn: Any) -> Any:
        parser = conn._parser
        reader = parser._reader
        response = reader.gets()
        if response is not_enough:
            sock, buffer = conn._sock, parser._buffer
            while response is not_enough:
                got = sock.recv_into(buffer)
                if not got:
                    raise redis_lib.ConnectionError("Connection closed by server.")
                reader.feed(buffer, 0, got)
                response = reader.gets()
        if isinstance(response, redis_lib.ConnectionError):
            raise response
        if response.__class__ is list and response and isinstance(
                response[0], redis_lib.ConnectionError):
            raise response[0]
        return response
    return read


def _reader(conn: Any) -> Callable[[Any], Any]:
    """How the short path reads a reply: with the parser's hiredis reader (_hiredis_read) or
    its read_response (both return an error reply as a value), unless the connection's class
    reads replies its own way (a Sentinel-managed one turns a demoted master's READONLY into a
    ConnectionError, so that the retry finds the new master): then through it (which raises
    error replies)."""
    if type(conn).read_response is not Connection.read_response:
        return _connection_read
    parser = conn._parser
    not_enough = getattr(sys.modules.get(type(parser).__module__), "NOT_ENOUGH_DATA", None)
    if (not_enough is None or not isinstance(getattr(parser, "_buffer", None), bytearray)
            or getattr(parser, "_reader", None) is None):
        return _parser_read
    return _hiredis_read(not_enough)


def short_path_for(client: redis_lib.Redis) -> tuple[str, str] | None:
    """(encoding, errors) if ``client``'s connection suits the short path, else None: a
    connection of redis-py's default protocol (RESP2 before redis-py 8, RESP3 from 8 on: the
    tests compare the replies with redis-py's own either way; a protocol set explicitly goes
    to redis-py), its hiredis parser, no health checks, no client-side cache."""
    conn = client.connection
    if _hiredis_pack is None or conn is None:
        return None
    kw = client.connection_pool.connection_kwargs
    if (kw.get("health_check_interval") or kw.get("protocol") not in (None, 2, "2")
            or getattr(client.connection_pool, "cache", None) is not None
            or type(getattr(conn, "_parser", None)).__name__ != "_HiredisParser"):
        return None
    encoder = client.get_encoder()
    return encoder.encoding, encoder.encoding_errors


def dedicated(client: redis_lib.Redis) -> JobRedis:
    """A JobRedis with ``client``'s connection settings and one connection, connected now
    (raises redis-py's ConnectionError or TimeoutError, or OSError, if Redis is away)."""
    pool = client.connection_pool
    job = JobRedis(connection_pool=redis_lib.ConnectionPool(
        connection_class=pool.connection_class, **pool.connection_kwargs),
        single_connection_client=True)
    job.short_path = short_path_for(job)
    if job.short_path is not None:
        job._passed = PACKED_AS_IS if job.short_path == ("utf-8", "strict") else _BYTES
        job._read = _reader(job.connection)
    return job
