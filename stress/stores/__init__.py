"""One adapter per store: how the attacks drive it (see :mod:`stress.core`).

Adapters are looked up by name; a store whose package is not importable in this
build is reported as unavailable instead of failing the whole run.
"""

from __future__ import annotations

import importlib

from stress.core import StoreAdapter

#: name -> module defining ``ADAPTER``; the order the runner attacks them in.
ADAPTER_MODULES = {
    "queue": "stress.stores.queue",
    "pages": "stress.stores.pages",
    "streams": "stress.stores.streams",
    "applog": "stress.stores.applog",
    "events": "stress.stores.events",
}


def get_adapter(name: str) -> StoreAdapter:
    """The adapter called ``name`` (KeyError for an unknown name).

    ``toy-*`` names are the harness's calibration store (:mod:`stress.toystore`),
    never attacked by default.
    """
    if name.startswith("toy-"):
        from stress.toystore import ADAPTERS

        return ADAPTERS[name]
    module = importlib.import_module(ADAPTER_MODULES[name])
    adapter: StoreAdapter = module.ADAPTER
    return adapter


def available() -> dict[str, str | None]:
    """name -> None if the adapter and its store import, else why not."""
    out: dict[str, str | None] = {}
    for name in ADAPTER_MODULES:
        try:
            get_adapter(name)
        except ImportError as exc:
            out[name] = f"not available: {exc}"
        else:
            out[name] = None
    return out
