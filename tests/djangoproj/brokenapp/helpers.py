import importlib

#: A library the app needs and the machine lacks.
LIBRARY = importlib.import_module("no_such_library_for_queued_tests")
