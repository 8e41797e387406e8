"""The DIVERSED paper's published numbers (acceptance % / quality), for `report --paper`.

Copied from the authors' table images as transcribed in ../shared/PAPER.md (Wang, Kasa et al.,
AISTATS 2026, arXiv 2604.07622): Table 1 (T = 1.0), Table 2 (T = 0.1), Table 3 (cross-task
transfer) and the Gemma-3 figure. Quality is GSM8K accuracy %, XSum and CNN/DM ROUGE-2 ×100, MBPP
pass@1 %. The paper does not say which draft length its table rows use.

Data only: the report decides how to show it.
"""

from __future__ import annotations

# our pair config names for the paper's pairs, and how the paper names them
PAIRS = {"llama8b_1b": "Llama 8B/1B", "qwen3_8b_0p6b": "Qwen3 8B/0.6B", "gemma3_12b_4b": "Gemma-3 12B/4B"}
# the paper's rows, by our method names
METHODS = {"lossless": "SD", "finetuned_draft": "SD, fine-tuned draft", "dynamic": "DIVERSED"}

# (temperature, pair, method, task) -> (acceptance %, quality)
TABLES: dict[tuple[float, str, str, str], tuple[float, float]] = {}
_ROWS = {
    1.0: """
llama8b_1b    lossless         44.60 67    20.44 7.09  26.30 53
llama8b_1b    finetuned_draft  66.44 67    35.41 6.95  47.07 53
llama8b_1b    dynamic          72.61 67    70.53 7.23  85.03 53
qwen3_8b_0p6b lossless         59.58 91    15.60 4.95  58.72 55
qwen3_8b_0p6b finetuned_draft  57.54 90    26.00 4.66  11.70 55
qwen3_8b_0p6b dynamic          76.48 88    47.01 5.01  81.46 59
""",
    0.1: """
llama8b_1b    lossless         66.40 76    17.69 7.82  72.94 61
llama8b_1b    finetuned_draft  52.81 76    18.81 7.97  74.32 61
llama8b_1b    dynamic          89.14 76    64.75 7.52  89.78 62
qwen3_8b_0p6b lossless         58.83 92    16.45 5.26  83.85 67
qwen3_8b_0p6b finetuned_draft  60.45 92    18.16 5.62  48.27 67
qwen3_8b_0p6b dynamic          90.26 92    71.22 7.84  91.23 67
""",
}
for _t, _text in _ROWS.items():
    for _line in _text.strip().splitlines():
        _pair, _method, *_v = _line.split()
        for _i, _task in enumerate(("gsm8k", "xsum", "mbpp")):
            TABLES[(_t, _pair, _method, _task)] = (float(_v[2 * _i]), float(_v[2 * _i + 1]))

# Table 3: (pair, evaluated on, head trained on or None for SD) -> (acceptance %, quality)
TRANSFER: dict[tuple[str, str, str | None], tuple[float, float]] = {
    ("llama8b_1b", "cnndm", None): (21.06, 9.46),
    ("llama8b_1b", "cnndm", "cnndm"): (69.96, 12.11),
    ("llama8b_1b", "cnndm", "gsm8k"): (51.07, 8.63),
    ("llama8b_1b", "gsm8k", None): (44.60, 67.0),
    ("llama8b_1b", "gsm8k", "gsm8k"): (72.61, 67.0),
    ("llama8b_1b", "gsm8k", "cnndm"): (72.57, 62.0),
    ("qwen3_8b_0p6b", "cnndm", None): (35.26, 9.85),
    ("qwen3_8b_0p6b", "cnndm", "cnndm"): (46.59, 10.97),
    ("qwen3_8b_0p6b", "cnndm", "gsm8k"): (62.55, 8.13),
    ("qwen3_8b_0p6b", "gsm8k", None): (59.58, 91.0),
    ("qwen3_8b_0p6b", "gsm8k", "gsm8k"): (76.48, 88.0),
    ("qwen3_8b_0p6b", "gsm8k", "cnndm"): (74.30, 78.0),
}

# The project page's Gemma-3 figure (CNN/DM): SD and DIVERSED (acceptance %, ROUGE-2)
GEMMA_CNNDM = {"lossless": (40.39, 9.06), "dynamic": (66.90, 10.86)}
