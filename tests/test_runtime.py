"""How entry points run: the allocator setting `runtime.malloc` (config/runtime.keep_freed_memory)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from diversed.config.runtime import keep_freed_memory

# A fresh process per setting (the setting is process-wide): 64 MB tensors made and freed five times
# over, once to grow the heap, then counted; prints whether the setting was applied and the page
# faults of the counted round.
CHURN = """
import resource, sys, torch
from diversed.config.runtime import keep_freed_memory
applied = keep_freed_memory(sys.argv[1])
def churn():
    for _ in range(5):
        t = torch.ones(16 * 2**20)  # 64 MB, every page written
        del t
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(how: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CHURN, how], capture_output=True, text=True, check=True)
    applied, n = out.stdout.split()
    return applied == "True", int(n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_keep_reuses_freed_memory_without_faulting_it_in_again():
    kept, n_keep = faults("keep")
    system, n_system = faults("system")
    assert not system and n_system >= 5 * 16 * 2**20 // 4096 * 0.9  # each 64 MB block faulted in anew
    if not kept:
        pytest.skip("not glibc: the allocator is left as it is")
    assert n_keep < n_system / 20


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="runtime.malloc must be one of"):
        keep_freed_memory("jemalloc")
