"""Files: written whole (atomic), run directories (lock, records read line by line), and digests
of files and settings for keying results.
"""
