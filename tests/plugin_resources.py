"""Two methods of one's own, defined OUTSIDE the package, whose knobs name paths (tests of
`test_method_resources.py`, loaded as the plugin `plugin_resources`; nothing in `diversed/` names them):

- `scaled_dynamic` reuses the built-in `HEAD` knob (exported by `diversed`): DIVERSED with the trained
  head's 1 − w shrunk by half, w' = 1 − (1 − w)/2. Its heads are checked, digested and loaded as
  `dynamic`'s are, through the knob, whatever the method's name.
- `weight_file` has a path knob of its own with no `Files`: the defaults check that each path exists,
  digest its content into the points' settings under the knob's field, and hand the verifier the path
  itself, from which it reads w (a static ensemble).
"""

from __future__ import annotations

from pathlib import Path

from diversed import HEAD, DynamicEnsemble, Knob, Method, StaticEnsemble, register


class ScaledDynamic(DynamicEnsemble):
    """w' = 1 − (1 − w)/2: the head's weight on the draft halved."""

    kind = "scaled_dynamic"

    def weights(self, p, q, h_draft, h_target):
        return 1 - (1 - super().weights(p, q, h_draft, h_target)) / 2


WEIGHT_FILE = Knob("weight_file", "weight_files", "file", type=str, path=True, label="a text file holding w")


def _weight_file(point, loaded):
    path = loaded[point["weight_file"]]  # no loader declared: what is loaded is the path itself
    assert path == point["weight_file"]
    return StaticEnsemble(float(Path(path).read_text()))


SCALED = register(
    Method(
        "scaled_dynamic",
        "Scaled DIVERSED ({head})",
        knobs=(HEAD,),
        verifier=lambda point, loaded: ScaledDynamic(loaded[point["head"]]),
        summary="DIVERSED with the head's 1 − w halved",
    )
)
FILE = register(
    Method(
        "weight_file",
        "Static from a file ({weight_file})",
        knobs=(WEIGHT_FILE,),
        verifier=_weight_file,
        summary="the static ensemble, w read from a file",
    )
)
