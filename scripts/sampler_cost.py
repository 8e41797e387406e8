"""The sampler's cost at a 151,936-id vocabulary on this CPU: the exponential race that
`decoding.verify.sample` replaced (argmax p / E, one exponential per id) against `sample` itself
(one uniform per row, float64 running sums), each the median of 50 calls, for 1 and 8 rows.

    python scripts/sampler_cost.py

Two torch threads, freed memory kept as the bench keeps it (`config.runtime.keep_freed_memory`).
BENCHMARKS.md quotes it ("one uniform per sampled token")."""

from __future__ import annotations

import statistics
import time

import torch

from diversed.config.runtime import keep_freed_memory
from diversed.decoding.verify import sample

V = 151_936


def main() -> None:
    keep_freed_memory("keep")
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)

    def race(p: torch.Tensor) -> torch.Tensor:  # argmax p(x) / E_x, E_x ~ Exp(1)
        return (p / torch.empty_like(p).exponential_(1.0, generator=g)).argmax(-1)

    for rows in (1, 8):
        p = torch.softmax(3 * torch.randn(rows, V, generator=g), -1)
        for name, draw in (("exponential race", race), ("inversion (sample)", lambda p: sample(p, g))):
            for _ in range(5):
                draw(p)
            times = []
            for _ in range(50):
                t0 = time.perf_counter()
                draw(p)
                times.append(time.perf_counter() - t0)
            print(f"{rows} row(s), {name}: {1e3 * statistics.median(times):.2f} ms")


if __name__ == "__main__":
    main()
