"""The test project's jobs (found by the daemon's autodiscovery: no -r names this module).

Each job writes what it saw into Redis (``t:dj:*``), where the tests read it."""
import json
import os

from django.db import connection, transaction
from django.db.models import F

import queued
from ledger.models import Item, Order


def note(key, **fields):
    queued.get_redis().rpush(key, json.dumps({"pid": os.getpid(), **fields}))


def backend_pid():
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


class Touch(queued.Job):
    """Reads and writes its row (the 1,000-job test)."""

    def perform(self, n):
        with transaction.atomic():
            item = Item.objects.select_for_update().get(n=n)
            Item.objects.filter(pk=item.pk).update(runs=F("runs") + 1, worker_pid=os.getpid(),
                                                   backend_pid=backend_pid(), jid=self.jid)


class SeeOrder(queued.Job):
    """Says whether the order it was pushed for is visible to it."""

    def perform(self, order_id):
        note("t:dj:seen", jid=self.jid, order_id=order_id,
             found=Order.objects.filter(pk=order_id).exists())


class Backend(queued.Job):
    """Says which database backend its worker talks to."""

    def perform(self):
        note("t:dj:backends", backend=backend_pid())


class SlowQuery(queued.Job):
    """Runs past its timeout inside a query."""
    queued_options = {"timeout": 0.5, "retry": 1}

    def perform(self):
        note("t:dj:slow", backend=backend_pid())
        with connection.cursor() as cur:
            cur.execute("SELECT pg_sleep(30)")


@queued.on("startup")
def master_uses_the_database():
    """When the test asks: the master queries before forking (its connection is then open
    at the fork), and again on every heartbeat (it must keep working while workers run)."""
    if os.environ.get("QUEUED_TEST_MASTER_DB"):
        note("t:dj:master", backend=backend_pid())


@queued.on("heartbeat")
def master_uses_it_again():
    if os.environ.get("QUEUED_TEST_MASTER_DB"):
        try:
            note("t:dj:master_beat", backend=backend_pid(), ok=True)
        except Exception as e:  # noqa: BLE001 - what broke is what the test wants to see
            note("t:dj:master_beat", ok=False, error=f"{type(e).__name__}: {e}")


#: What Remember's runs saw, in this process (the project's own TestCase tests read it).
REMEMBERED = []


class Remember(queued.Job):
    """Keeps its argument in this process (queued.testing's modes; touches nothing else)."""

    def perform(self, value):
        REMEMBERED.append(value)
