import no_such_library_for_queued_tests  # noqa: F401
