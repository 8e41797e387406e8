"""llama.cpp decoding a GGUF file, as an outside reference: what a laptop user's engine does with the
same file on the same threads (the bench's anchor for what this CPU can do, `python -m diversed.bench
--llama-cpp`).

`LlamaCpp` needs the optional extra `pip install 'diversed[llamacpp]'` (`llama-cpp-python`, built
from its source package for this CPU); without it, a ConfigError saying so. It returns statistics
like the other decoders' (every new token a round, nothing drafted) and counts its forwards into a
`meter.ForwardTimes`. It is a speed anchor, not a quality baseline, and it does not find the GGUF file
(the bench resolves `--llama-cpp`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

from diversed.decoding.meter import ForwardTimes
from diversed.decoding.stats import SpeculativeStats
from diversed.errors import ConfigError

LLAMA_CPP_MISSING = (
    "--llama-cpp needs llama-cpp-python: pip install 'diversed[llamacpp]' (built from its source package "
    "for this CPU, several minutes)"
)


class LlamaCpp:
    """Autoregressive decoding of a GGUF target with llama.cpp (`llama-cpp-python`, the bench's
    optional extra `pip install 'diversed[llamacpp]'`, built from its source package for this CPU):
    what a laptop user's engine does with the same file, on the same threads, as the reference for
    what this CPU can do. Batch 1; each prompt read in one `eval`, then one token per `eval`, sampled
    by llama.cpp's own sampler at the setting's temperature with no top-k, top-p or min-p (greedy at
    T = 0), seeded per call. It decodes the GGUF's own weights in its own kernels (a Q4_K_M target
    is read as 4–6-bit blocks, its activations rounded to 8 bits), so its law is not exactly the
    law of the float model converted from the same file: a speed anchor, not a quality baseline."""

    def __init__(self, path: str, threads: int, context: int) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise ConfigError(LLAMA_CPP_MISSING) from None
        self.path = path
        self.llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=context,
            n_batch=context,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.version = llama_cpp.__version__

    def generate(
        self,
        ids: Tensor,
        mask: Tensor,
        temperature: float,
        max_new: int,
        eos: list[int],
        gen: torch.Generator,
        times: ForwardTimes,
    ) -> Any:
        """Decode each row of `ids` (left-padded, `mask` its text) and count its forwards into `times` as
        `meter.ForwardMeter` counts the others' (the prompt's `eval` a prompt pass); returns an object
        with `.stats`."""
        new = []
        for row, text in zip(ids, mask, strict=True):
            prompt = row[text.bool()].tolist()
            self.llm.reset()
            self.llm.set_seed(int(torch.randint(2**31 - 1, (), generator=gen)))
            t0 = time.perf_counter()
            self.llm.eval(prompt)
            prompt_s = time.perf_counter() - t0
            n, t1 = 0, time.perf_counter()
            while n < max_new:
                token = self.llm.sample(top_k=0, top_p=1.0, min_p=0.0, temp=temperature)
                n += 1
                if token in eos or n == max_new:
                    break
                self.llm.eval([token])
            steps_s = time.perf_counter() - t1
            times.calls["target"] += n  # the prompt's eval, then one per token after the first
            times.prefill_calls["target"] += 1
            times.seconds["target"] += prompt_s + steps_s
            times.prefill_s["target"] += prompt_s
            new.append(n)
        new_tokens = torch.tensor(new)
        zeros = torch.zeros_like(new_tokens)
        stats = SpeculativeStats(
            proposed=zeros,
            accepted=zeros,
            rounds=new_tokens.clone(),
            new_tokens=new_tokens,
            accepted_hist=new_tokens.view(-1, 1).clone(),
            w_sum=torch.zeros(len(new)),
            w_count=zeros,
            target_calls=int(new_tokens.sum()),
            verifier="llama.cpp",
        )
        return type("Output", (), {"stats": stats})()
