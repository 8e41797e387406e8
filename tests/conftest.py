"""Shared fixtures. Keep each group under its own header."""

from __future__ import annotations

import pytest
import torch

# The test models are tiny: a second torch thread gains nothing and, on a busy 2-core machine,
# threads competing for a core made the suite ten times slower.
torch.set_num_threads(1)

# -------------------------------------------------------------------------- toy pair (diversed/models/toy.py)


@pytest.fixture(scope="session")
def toy_tiny_dir(tmp_path_factory):
    """A few-step build of tiny toy models (seconds): target/ and draft/ like a Hub pair."""
    from diversed.models.toy import ToyBuildConfig, build

    out = tmp_path_factory.mktemp("toy-tiny")
    build(ToyBuildConfig.tiny(), out, progress=False)
    return out


@pytest.fixture(scope="session")
def toy_pair_dir():
    """The default toy pair: the one shipped in diversed/models/toy_pair (digests checked, nothing
    trained). For `slow` tests."""
    from diversed.models.toy import ensure_toy_pair

    return ensure_toy_pair(progress=False)
