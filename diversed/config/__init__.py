"""Configuration, the generic machinery: the settings base and the checking that refuses bad input
before weights load (each domain declares its own settings), the keys a composed config may hold,
where a Hydra job writes, and how an entry point runs (threads, quiet output, loggers, resolvers).

May import: files; tests/test_structure.py's MAY_IMPORT.
"""
