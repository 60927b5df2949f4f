"""Which NVML C library the NVML child process talks to: the driver's, or one a test names.

pynvml loads ``libnvidia-ml.so.1`` itself: ``_LoadNvmlLibrary`` calls ``CDLL("libnvidia-ml.so.1")``
once, while its module global ``nvmlLib`` is None, maps an ``OSError`` to
``NVML_ERROR_LIBRARY_NOT_FOUND``, and every wrapper then reaches the library through
``_nvmlGetFunctionPointer(name)`` = ``getattr(nvmlLib, name)`` (a missing attribute is
``NVML_ERROR_FUNCTION_NOT_FOUND``); see pynvml.py (nvidia-ml-py 13.615.71) ``_LoadNvmlLibrary``
and ``_nvmlGetFunctionPointer``. A transport that names a ``library_factory`` answers that one
``CDLL`` call with the factory's object, so pynvml installs it as ``nvmlLib`` and runs its real
structs, buffers, versioned calls and error mapping over it; a factory that raises ``OSError``
takes pynvml's own "library not found" path.

The transport is a plain value so it can cross into the child on its command line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REAL_LABEL = "pynvml"


class TransportError(ValueError):
    """A ``library_factory`` that does not name an importable ``module:function``."""


@dataclass(frozen=True, slots=True)
class NvmlTransport:
    """How the NVML child reaches NVML. The default is the driver's own library.

    ``library_factory`` is ``"package.module:function"``; the function is called with ``argument``
    and returns the object pynvml will use as its C library. ``label`` names the source in the
    report (``"pynvml"`` for the real library).
    """

    library_factory: str | None = None
    argument: str = ""
    label: str = REAL_LABEL

    @property
    def is_real(self) -> bool:
        """True when the child loads the driver's ``libnvidia-ml.so.1``."""
        return self.library_factory is None

    def child_args(self) -> list[str]:
        """The command-line arguments that carry this transport to ``preflight.probe.nvml_child``."""
        args = ["--label", self.label]
        if self.library_factory is not None:
            args += ["--library-factory", self.library_factory, "--library-argument", self.argument]
        return args

    def factory(self) -> Callable[[str], Any]:
        """The named factory function; raises :class:`TransportError` when it cannot be imported."""
        if self.library_factory is None:
            raise TransportError("the real transport has no library factory")
        module_name, _, function = self.library_factory.partition(":")
        if not module_name or not function:
            raise TransportError(f"library factory {self.library_factory!r} is not 'module:function'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TransportError(f"library factory module {module_name!r} cannot be imported: {exc}") from exc
        found = getattr(module, function, None)
        if not callable(found):
            raise TransportError(f"{module_name} has no function {function!r}")
        return found  # type: ignore[no-any-return]  # getattr on a module is Any; callable() checked it

    def install(self) -> None:
        """In the child, before ``nvmlInit``: make pynvml load the factory's library (no-op when real)."""
        if self.library_factory is None:
            return
        import pynvml

        factory, argument = self.factory(), self.argument

        def load(name: str, *args: Any, **kwargs: Any) -> Any:
            return factory(argument)  # an OSError here is pynvml's NVML_ERROR_LIBRARY_NOT_FOUND

        pynvml.CDLL = load  # pynvml did `from ctypes import *`; _LoadNvmlLibrary calls CDLL(...)
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()


REAL = NvmlTransport()
"""The driver's NVML."""
