"""One adapter per store: how the attacks drive it (see :mod:`stress.core`).

Adapters are looked up by name.  Every store is part of engine, so an adapter
(or the store under it) that fails to import is an error that names the store and
the module, never a store quietly left out of the run: a run that skipped a store
would report no violation for it and prove nothing.
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
    "kv": "stress.stores.kv",
}


class AdapterImportError(ImportError):
    """A store's stress adapter, or the store's own modules, failed to import."""


def get_adapter(name: str) -> StoreAdapter:
    """The adapter called ``name`` (KeyError for an unknown name).

    ``toy-*`` names are the harness's calibration store (:mod:`stress.toystore`),
    never attacked by default.  Raises :class:`AdapterImportError` (with the
    import error chained) when the adapter or its store does not import.
    """
    if name.startswith("toy-"):
        from stress.toystore import ADAPTERS

        return ADAPTERS[name]
    module_name = ADAPTER_MODULES[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterImportError(
            f"the {name} store cannot be attacked: {module_name} failed to import "
            f"({type(exc).__name__}: {exc})",
            name=module_name,
        ) from exc
    adapter: StoreAdapter = module.ADAPTER
    return adapter


def load_adapters(names: list[str]) -> dict[str, StoreAdapter]:
    """name -> adapter for every name, importing them all before any attack runs
    (so a broken store fails the run at once, not after the others' minutes)."""
    return {name: get_adapter(name) for name in names}
