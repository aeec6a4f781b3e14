"""Job code with a SQLAlchemy engine made at import, in the master (as an application's
module-level engine is), for tests/integration/test_sqlalchemy_fork.py. The master uses the
pool before it forks (a startup handler), so a connection sits in the pool at every fork.

With QUEUED_TEST_SQLA_HOOK=1 each worker re-makes the pool in ``worker_start``, as
docs/django.md tells SQLAlchemy users to: ``engine.dispose(close=False)`` drops the inherited
connections without closing them (closing would end the master's sessions).
"""
import json
import os

import sqlalchemy as sa

import queued

engine = sa.create_engine(os.environ["QUEUED_TEST_SQLA_URL"], pool_size=2)


def note(key, **fields):
    queued.get_redis().rpush(key, json.dumps({"pid": os.getpid(), **fields}))


def backend():
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()


@queued.on("startup")
def master_uses_the_pool():
    note("t:sa:master", backend=backend(), pooled=engine.pool.checkedin())


if os.environ.get("QUEUED_TEST_SQLA_HOOK") == "1":
    @queued.on("worker_start")
    def fresh_pool():
        inherited = engine.pool.checkedin()
        engine.dispose(close=False)
        note("t:sa:worker_start", inherited=inherited, pooled=engine.pool.checkedin())

    @queued.on("heartbeat")
    def master_uses_it_again():
        try:
            note("t:sa:master_beat", backend=backend(), ok=True)
        except Exception as e:  # noqa: BLE001 - what broke is what the test wants to see
            note("t:sa:master_beat", ok=False, error=f"{type(e).__name__}: {e}")


class SaBackend(queued.Job):
    def perform(self):
        note("t:sa:backends", backend=backend())
