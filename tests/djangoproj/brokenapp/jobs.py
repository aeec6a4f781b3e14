"""An app's jobs module that fails on import, deep in the app's own code."""
from brokenapp import helpers

HELPERS = helpers
