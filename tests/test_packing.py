"""queued.connection.pack_commands: the bytes redis-py's packer would write, made by hiredis for
commands of bytes, str and int (a worker's reserve call, its acks, a push), by redis-py for
anything else. Pure logic: redis-py's packer is the reference; no server is needed."""
from __future__ import annotations

import pytest
import redis as redis_lib

from queued import connection
from queued.connection import pack_commands


def conn(**kwargs):
    return redis_lib.Connection(**kwargs)


def theirs(c, commands) -> bytes:
    return b"".join(bytes(chunk) for chunk in c.pack_commands(commands))


def ours(c, commands) -> bytes:
    return b"".join(bytes(chunk) for chunk in pack_commands(c, commands))


COMMANDS = [
    [("ZREM", "queued:reserved:h:1:abc:0", b"default\x00tok\x00{\"jid\":\"x\"}")],
    [("EVALSHA", "a" * 40, 4, "k1", b"k2", "k\u00e9", "\u65e5\u672c", 32, 1, -7, 2 ** 70,
      b"", "", b"\xff\x00\r\n")],
    [("SADD", "queues", "default"), ("LPUSH", "queue:default", '{"a":"\u00fc"}', b"raw")],
    [("PING",)],
]


@pytest.mark.parametrize("commands", COMMANDS)
def test_commands_of_bytes_str_and_int_pack_as_redis_py_packs_them_and_go_to_hiredis(
        commands, monkeypatch):
    c = conn()
    expected = theirs(c, commands)
    # (redis-py's packer is not asked: these go to hiredis whole)
    monkeypatch.setattr(c, "pack_commands", lambda cmds: pytest.fail("redis-py's packer"))
    assert ours(c, commands) == expected


@pytest.mark.parametrize("commands", [
    [("SET", "k", 1.5)],                       # a float: redis-py's repr, not hiredis's
    [("SET", "k", memoryview(b"v"))],          # redis-py sends these without a copy
    [("CLIENT SETNAME", "x")],                 # redis-py splits a name with a space
    [("SET", "k", True)],                      # redis-py refuses it (DataError)
    [("PING",), ("SET", "k", bytearray(b"v"))],  # one such command: all go to redis-py
])
def test_anything_else_goes_to_redis_pys_packer(commands):
    c = conn()
    asked = []
    real = c.pack_commands
    c.pack_commands = lambda cmds: asked.append(cmds) or real(cmds)
    try:
        expected = theirs(redis_lib.Connection(), commands)
    except redis_lib.DataError:
        with pytest.raises(redis_lib.DataError):
            ours(c, commands)
        return
    assert ours(c, commands) == expected
    assert asked == [commands]


@pytest.mark.parametrize("kwargs,text,written", [
    ({"encoding": "latin-1"}, "\u00e9", b"\xe9"),            # (UTF-8 would write two bytes)
    ({"encoding_errors": "replace"}, "a\udc80", b"a?"),     # (hiredis would raise)
])
def test_a_connection_with_another_encoding_is_packed_by_redis_py(kwargs, text, written):
    c = conn(**kwargs)
    commands = [("SET", "k", text)]
    assert ours(c, commands) == theirs(c, commands)
    assert ours(c, commands).endswith(b"\r\n" + written + b"\r\n")


def test_without_hiredis_every_command_is_redis_pys(monkeypatch):
    monkeypatch.setattr(connection, "hiredis_pack", None)
    c = conn()
    commands = [("SET", "k", "v")]
    assert pack_commands(c, commands) == c.pack_commands(commands)
