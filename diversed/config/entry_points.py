"""The objects installed packages plug in: each entry point of a group (`diversed.methods`,
`diversed.tasks`) loaded, or a ConfigError naming the one that cannot be imported and the fix.

It loads and returns; what an object is and where it registers is the registry's (`sweep/methods.py`
for methods, `tasks/__init__.py` for tasks). It imports nothing heavy: the method registry reads it
without torch.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

from diversed.errors import ConfigError


def load_group(group: str) -> Iterator[Any]:
    """What each entry point of `group` names (a module, or an object such as a `Method` or a task
    class), loaded one at a time in the order the installed packages list them (the caller registers each
    before the next loads)."""
    for ep in importlib.metadata.entry_points(group=group):
        try:
            yield ep.load()
        except ImportError as e:
            raise ConfigError(
                f"the {group} entry point {ep.name} = {ep.value} cannot be imported "
                f"({type(e).__name__}: {e}): reinstall or uninstall its package"
            ) from None
