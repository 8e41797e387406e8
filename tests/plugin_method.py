"""A method of one's own, defined OUTSIDE the package: a verifier with one knob, registered through the
public API (README, "Add your own method"). The test suite loads it as a plugin (`plugins=[plugin_method]`
for evaluate, `--plugin plugin_method` for report, plot and show, with tests/ on PYTHONPATH); nothing in
`diversed/` names it.

Power acceptance: accept a drafted x with probability min(1, (p(x)/q(x))^β), β in (0, 1]; at a rejection
the residual normalize(max(0, p − q)), the bonus from p (the `Verifier` defaults). β = 1 is standard
speculative decoding (the same test on the same uniforms: the same tokens); a smaller β accepts more, and
the output drifts from p.
"""

from __future__ import annotations

from diversed import Knob, Method, register
from diversed.decoding.verify import Verifier, at_token, uniform


class PowerAcceptance(Verifier):
    """Accept x with probability min(1, (p(x)/q(x))^β)."""

    kind = "power"

    def __init__(self, beta: float) -> None:
        super().__init__()
        self.beta = float(beta)

    def accept(self, p, q, x, w, generator):
        # u < (p(x)/q(x))^β  <=>  u^(1/β)·q(x) < p(x), without the division (β = 1: the lossless test)
        return uniform(x, generator) ** (1.0 / self.beta) * at_token(q, x) < at_token(p, x)

    def extra_repr(self) -> str:
        return f"beta={self.beta}"


BETA = Knob(
    "power_beta",
    "power_betas",
    "β",
    interval="(0, 1]",
    label="the power on p/q, 1 = lossless",
    default=(0.5, 1.0),
)
METHOD = register(
    Method(
        "power",
        "Power β={power_beta:g}",
        knobs=(BETA,),
        family="power_beta",
        verifier=lambda point, loaded: PowerAcceptance(point["power_beta"]),
        summary="accept x with min(1, (p(x)/q(x))^β): β = 1 is lossless, smaller β accepts more",
    )
)
