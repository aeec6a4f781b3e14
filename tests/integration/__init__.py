"""Real daemons against a real Redis (a package so its module names do not clash with the
unit tests of the same name in tests/)."""
