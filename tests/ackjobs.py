"""Job class for tests/integration/test_batch_acks.py: each job writes down, as it starts, which
jobs its worker still holds reserved (so which finished ones are not acked yet), and when it
started and ended on the worker's monotonic clock."""
import json
import time

import queued

SEEN = "t:acks"  # hash jid -> {"start", "end", "reserved": [jids]} (json)


class SeeReserved(queued.Job):
    queued_options = {"retry": 0}

    def perform(self, seconds):
        start = time.monotonic()
        r = queued.get_redis()
        reserved = [json.loads(m.split(b"\0", 2)[2])["jid"]
                    for key in r.scan_iter("queued:reserved:*") for m in r.zrange(key, 0, -1)]
        time.sleep(seconds)
        r.hset(SEEN, self.jid, json.dumps({"start": start, "end": time.monotonic(),
                                           "reserved": reserved}))
