"""Job code that cannot be imported."""
import queued


class Fine(queued.Job):
    def perform(self):
        pass


raise RuntimeError("kaboom at import")
