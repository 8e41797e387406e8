"""Training: the Lightning modules over a frozen pair (the DIVERSED head by REINFORCE, a draft
distilled towards its target), their settings, prompts and teacher samples, the trainer (checked
against the machine, fitted, exported) and checkpoints that resume bit for bit. The entry points are
`diversed.train` and `diversed.distill`.

May import: decoding, files, config, models, tasks; tests/test_structure.py's MAY_IMPORT.
"""
