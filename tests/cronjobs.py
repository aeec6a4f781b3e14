"""Job code for the periodic-job tests: a Job class and a function job, each with a schedule
declared in Python (registered when a daemon imports this file with -r)."""
import queued


class Tick(queued.Job):
    """Named in the tests' config-file schedules; pushed to a queue no test daemon serves, so
    every pushed job stays in its list for the test to read."""
    queued_options = {"queue": "ticks"}

    def perform(self, *args):
        pass


@queued.periodic(every="1s", queue="pyticks", name="py_every_second")
class PyTick(queued.Job):
    def perform(self, *args):
        pass


@queued.periodic("*/2 * * * * *", queue="pyticks", args=["fn"])
@queued.job
def cleanup(*args):
    pass
