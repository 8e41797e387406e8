"""diversed: relaxed speculative decoding via dynamic ensemble verification (DIVERSED).

`speculative_generate(target, draft, input_ids, verifier=...)` decodes with the draft proposing
and the target verifying against v = w·p + (1 − w)·q, w the weight on the TARGET.
"""

from diversed.engine import SpeculativeOutput, SpeculativeStats, speculative_generate
from diversed.heads import WeightHead
from diversed.verify import DynamicEnsemble, Lossless, StaticEnsemble, Verifier

__all__ = [
    "DynamicEnsemble",
    "Lossless",
    "SpeculativeOutput",
    "SpeculativeStats",
    "StaticEnsemble",
    "Verifier",
    "WeightHead",
    "speculative_generate",
]
