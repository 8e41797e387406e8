"""Files: written whole (atomic), run directories (lock, records read line by line), digests of
files and settings for keying results, and where the cache lives (`cache.cache_root`).

May import: nothing of the package (but `diversed.errors`); tests/test_structure.py's MAY_IMPORT.
"""
