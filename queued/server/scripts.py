"""The daemon's Lua scripts (queued/server/lua/), one per atomic step of a job's path; each
file's header names its KEYS and ARGV."""
from __future__ import annotations

import os

from ..connection import Script
from ..tracking import LIBRARY as _TASKS

_LUA = os.path.join(os.path.dirname(__file__), "lua")

RESERVE = Script(_LUA, "reserve")
FAIL = Script(_LUA, "fail", prelude=_TASKS)  # moves a job of a task too
FINISH = Script(_LUA, "finish", prelude=_TASKS)  # the successes of a task's jobs, per batch
REQUEUE = Script(_LUA, "requeue")
DUE = Script(_LUA, "due")
ENQUEUE_DUE = Script(_LUA, "enqueue_due")
RENEW_LEADER = Script(_LUA, "renew_leader")
CRON_SYNC = Script(_LUA, "cron_sync")
EXPIRED = Script(_LUA, "expired")  # issue 21: server/guards.py
