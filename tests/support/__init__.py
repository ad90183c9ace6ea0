"""Helpers and corpora the tests share: not tests themselves, imported as `support.<module>`.

pytest puts tests/ on sys.path (it has no __init__.py), so `support` is a top-level package for
the tests; the benchmarks in bench/ add tests/ to sys.path to import it the same way.
"""
