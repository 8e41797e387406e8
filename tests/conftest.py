"""Shared fixtures. Keep each group under its own header."""

from __future__ import annotations

import pytest
import torch

# The test models are tiny: a second torch thread gains nothing and, on a busy 2-core machine,
# threads competing for a core made the suite ten times slower.
torch.set_num_threads(1)

# absl's log handler (absl is imported by rouge-score) keeps the stream sys.stderr was when absl was first
# imported: during collection, pytest's capture of it. Hydra's logging setup in a test that runs an entry
# point in this process (logging.config.dictConfig) closes every handler, and absl's closes that stream
# unless it is the process's own stderr: pytest's capture then fails ("I/O operation on closed file").
# Imported here first, its stream is the process's stderr, which it never closes.
try:
    import sys

    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
except ImportError:
    pass

# Composing our configs needs the registered knobs' grids and tasks' configs in Hydra's store, which the
# entry points put there before composing (`diversed.prepare_hydra`); the tests compose with Hydra's own
# `compose`, so once here (later registrations refresh it).
from diversed.sweep.plugins import prepare_hydra  # noqa: E402

prepare_hydra()

# -------------------------------------------------------------------------- toy pair (diversed/models/toy.py)


@pytest.fixture(scope="session")
def toy_tiny_dir(tmp_path_factory):
    """A few-step build of tiny toy models (seconds): target/ and draft/ like a Hub pair."""
    from diversed.models.toy import ToyBuildConfig
    from diversed.toy import build  # the models trained, and their quality gap measured

    out = tmp_path_factory.mktemp("toy-tiny")
    build(ToyBuildConfig.tiny(), out, progress=False)
    return out


@pytest.fixture(scope="session")
def toy_pair_dir():
    """The default toy pair: the one shipped in diversed/models/toy_pair (digests checked, nothing
    trained). For `slow` tests."""
    from diversed.models.toy import ensure_toy_pair

    return ensure_toy_pair(progress=False)
