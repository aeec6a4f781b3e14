"""An async job's time limit (server/asynclimit.py) on a real event loop: it counts the time the
job could run, not the time another job held the loop (rt2 finding 4), and a job that holds
the loop itself is not excused; a cancel lost is made again (rt2 finding 1)."""
import asyncio
import time
from typing import NamedTuple

from queued.errors import JobTimeout
from queued.server.asynclimit import AsyncLimit


class Ran(NamedTuple):
    outcome: str      # "done" | "cancelled" | "cancelled by another" | "JobTimeout: ..."
    elapsed: float    # seconds from its start to its end
    own: float        # the limit's figures as the job ended: its own holds of the loop,
    waited: float     # the time it was excused (the loop held by others),
    cancels: int      # and the cancels it made


async def limited(seconds: float, body, every: float = 0.05) -> Ran:
    """Run ``body()`` under a limit as the runner does."""
    limit = AsyncLimit(seconds, every)
    t0 = time.monotonic()
    outcome = "?"
    try:
        limit.inside = True
        await limit.timed(body())
        outcome = "done"
    except asyncio.CancelledError:
        outcome = "cancelled" if limit.expired else "cancelled by another"
    except JobTimeout as e:
        outcome = f"JobTimeout: {e}"
    finally:
        figures = (time.monotonic() - t0, limit.own, limit.waited(), limit.cancels)
        limit.close()
    return Ran(outcome, *figures)


def test_a_job_that_waited_on_a_held_loop_is_not_cancelled_for_that_time():
    async def main():
        async def waits():
            await asyncio.sleep(0.5)  # (0.1 s of its own time after the loop comes back)

        async def holds():
            await asyncio.sleep(0.05)
            time.sleep(0.4)  # another job holds the loop

        job = asyncio.ensure_future(limited(0.3, waits))
        await holds()
        return await job

    # Given a 0.3 s limit, a job that awaits 0.5 s while another holds the loop 0.4 s of it
    ran = asyncio.run(main())
    # Then it ends: 0.5 s, of which it could run only ~0.1 s
    assert ran.outcome == "done" and ran.elapsed >= 0.5


def test_a_job_that_holds_the_loop_itself_is_cancelled_at_its_limit():
    held = {}

    async def holds_then_waits():
        time.sleep(1.0)  # its own hold, past its 0.3 s limit: not excused
        held["until"] = time.monotonic()
        await asyncio.sleep(5)

    # Given a 0.3 s limit, a job that holds the loop 1 s itself
    ran = asyncio.run(limited(0.3, holds_then_waits))
    # Then its hold counted as its own, none of it excused
    assert ran.own >= 1.0 and ran.waited < 0.1, ran
    # And it was cancelled as the loop came back
    assert ran.outcome == "cancelled"
    assert time.monotonic() - held["until"] < 0.2  # (excused, it would run ~0.25 s more)


def test_a_job_that_loses_every_cancel_gets_a_jobtimeout_at_its_next_step():
    async def loses_them_all():
        end = time.monotonic() + 3  # (an end, so a JobTimeout that never comes fails the test)
        while time.monotonic() < end:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # (as asyncio.wait_for does when what it wraps finished meanwhile)

    # Given a 0.2 s limit, cancels 0.1 s apart, and a job that drops every cancel
    ran = asyncio.run(limited(0.2, loses_them_all, every=0.1))
    # Then the cancel at 0.2 s was lost, and the second one was a JobTimeout at its next step
    assert ran.outcome == "JobTimeout: job exceeded its 0.2s timeout and was cancelled"
    assert ran.cancels == 2 and ran.elapsed >= 0.3
