"""Analysis: from records to claims: Pareto fronts and knob choices, paired differences over
seeds, the report's tables and figures, the paper's published numbers. Reads records, never models.

May import: files, sweep; tests/test_structure.py's MAY_IMPORT.
"""
