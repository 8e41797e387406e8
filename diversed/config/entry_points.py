"""The objects installed packages plug in: each entry point of a group (`diversed.methods`,
`diversed.tasks`) loaded, or a ConfigError naming the one that cannot be imported and the fix.

It loads and returns; what an object is and where it registers is the registry's (`sweep/methods.py`
for methods, `tasks/__init__.py` for tasks). It imports nothing heavy: the method registry reads it
without torch.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from diversed.errors import ConfigError


def load_group(group: str) -> list[Any]:
    """What each entry point of `group` names (a module, or an object such as a `Method` or a task
    class), loaded in the order the installed packages list them."""
    found = []
    for ep in importlib.metadata.entry_points(group=group):
        try:
            found.append(ep.load())
        except ImportError as e:
            raise ConfigError(
                f"the {group} entry point {ep.name} = {ep.value} cannot be imported "
                f"({type(e).__name__}: {e}): reinstall or uninstall its package"
            ) from None
    return found
