"""The shell: the ``hotboard`` command line and the dev tooling behind it (embedded stack, load generator).

It is the one package that may import every other (``hotboard`` the shared base, ``flusher``, ``ingest``,
``reader_api``); nothing imports it but the entry point, the benchmarks and the tests.
"""
