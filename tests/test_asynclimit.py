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


def test_the_time_excused_for_a_loop_held_by_others_is_at_most_the_excuse():
    pieces = []  # the holder's pieces done, one entry each

    async def main():
        async def waits():
            await asyncio.sleep(5)

        async def holds_in_pieces():  # (a job without a limit: 6 holds of 0.3 s, awaits between)
            for _ in range(6):
                time.sleep(0.3)
                pieces.append(1)
                await asyncio.sleep(0)

        limit_job = asyncio.ensure_future(limited_with_excuse(0.2, waits, 0.3, pieces))
        await asyncio.sleep(0.01)
        await holds_in_pieces()
        return await limit_job

    # Given a 0.2 s limit whose excuse is 0.3 s (half the grace: the master's kill does not
    # move with it), a job that only waits, beside another holding the loop 1.8 s in pieces
    # of 0.3 s
    outcome, at = asyncio.run(main())
    # Then it is cancelled at the first turn of the loop past its limit and the whole excuse
    # (0.5 s: after the holder's 2nd piece, or its 3rd if the holder's turn came first), not
    # as the holds keep moving its limit (rt5 finding 1: excused without end, it outlived the
    # master's deadline and its process was killed; unbounded, the cancel came after 4 or 5)
    assert outcome == "cancelled" and at in (2, 3), at


async def limited_with_excuse(seconds: float, body, excuse: float, pieces: list):
    """As ``limited``, with an excuse; ("done" | "cancelled", the holder's pieces by then)."""
    limit = AsyncLimit(seconds, 0.05, "job", excuse)
    try:
        limit.inside = True
        await limit.timed(body())
        return "done", len(pieces)
    except asyncio.CancelledError:
        return ("cancelled" if limit.expired else "cancelled by another"), len(pieces)
    finally:
        limit.close()
