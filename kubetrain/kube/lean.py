"""``kubernetes_asyncio``'s transport and kubeconfig loading, without its generated API and models.

The controller talks HTTP through ``ApiClient.call_api`` and raw JSON (``kubetrain.kube.client``): it
never uses the generated API classes or models. But ``kubernetes_asyncio``'s package ``__init__``
files import all of them, 859 modules, about 30 MiB of memory in every controller process, and a
second of start-up, for nothing. What the controller needs lives in a handful of modules
(``client.api_client``, ``client.configuration``, ``client.rest``, ``client.exceptions`` and the
``config`` package) that do not need the rest.

``load()`` imports just those: it puts stand-ins for the packages ``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models`` into ``sys.modules`` (real
package objects, with the real ``__path__``, so their submodules import as usual), each of which runs
its real ``__init__`` the first time a name it does not have yet is asked of it. So code in the same
process that does use the generated API (``from kubernetes_asyncio.client import CoreV1Api``, as the
job client and the tests do) gets the whole package, just later. Where ``kubernetes_asyncio`` was
imported before, ``load()`` changes nothing.

No library does this: the import machinery's own ``LazyLoader`` runs a package's ``__init__`` at the
first attribute asked of it, and importing a submodule asks for ``__path__``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

PACKAGE = "kubernetes_asyncio"
PACKAGES = (PACKAGE, f"{PACKAGE}.client", f"{PACKAGE}.client.models")  # parents first


class _Deferred(types.ModuleType):
    """A package whose ``__init__`` runs the first time a name it lacks is asked of it, unless the name
    is one of its submodules (``from package import submodule`` asks the package first)."""

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("_kubetrain_complete"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        folder = Path(self.__dict__["__path__"][0])
        if (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file():
            return importlib.import_module(f"{self.__name__}.{name}")
        self.__dict__["_kubetrain_complete"] = True
        init = Path(self.__dict__["__file__"])
        exec(compile(init.read_text(), str(init), "exec"), self.__dict__)  # the package's own __init__
        return getattr(self, name)


def load() -> tuple[Any, Any]:
    """``(kubernetes_asyncio.client, kubernetes_asyncio.config)``, with the client's ``ApiClient``,
    ``Configuration`` and ``ApiException`` loaded and nothing of its generated API."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)  # a top-level name: found, not imported
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"{PACKAGE} is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        for name in PACKAGES:
            folder = root.joinpath(*name.split(".")[1:])
            module = _Deferred(name)
            module.__file__ = str(folder / "__init__.py")
            module.__path__ = [str(folder)]
            module.__package__ = name
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
        # The top package's __init__ sets these two, then imports its subpackages (served above, each
        # when asked for): so it never needs to run, and a subpackage that imports the package's
        # version while the rest of the package is not loaded yet (kubernetes_asyncio.dynamic does)
        # gets it without running that __init__ in the middle of its own import.
        top = sys.modules[PACKAGE]
        setattr(top, "__project__", PACKAGE)  # noqa: B010 - names a module type does not declare
        setattr(top, "__version__", importlib.metadata.version(PACKAGE))  # noqa: B010
        client = sys.modules[f"{PACKAGE}.client"]
        for submodule, names in (
            ("configuration", ("Configuration",)),
            ("api_client", ("ApiClient",)),
            ("exceptions", ("ApiException", "ApiValueError")),
        ):
            loaded = importlib.import_module(f"{PACKAGE}.client.{submodule}")
            for attribute in names:
                setattr(client, attribute, getattr(loaded, attribute))
    return importlib.import_module(f"{PACKAGE}.client"), importlib.import_module(f"{PACKAGE}.config")
