"""Module attributes imported on first use (PEP 562), for start-up time: the CLI
reaches its first connect before the engine, hashing and detector modules load."""

from __future__ import annotations

import sys

# Nothing else up front: the package's __init__ imports this module before the
# entry point's first line (launch.main), where Ctrl-C is not handled yet.
TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_attributes(
    module: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__, __dir__ = lazy_attributes(__name__, {name: module, ...})``.

    ``where`` maps each public name to the module that defines it; a name is
    imported on its first use and then kept in the module's globals."""
    namespace = sys.modules[module].__dict__  # (the module calling this, loading)

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(source), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


class LazyLogger:
    """``logging.getLogger(name)`` without importing logging up front (~6 ms on the
    way to the first connect, early.py). Until something imports logging, nothing
    can have configured it, and an unconfigured logger drops DEBUG and INFO: so
    do these, until then. WARNING and above import logging and go through it."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def _logger(self, *, load: bool) -> Any:
        logging = sys.modules.get("logging")
        if logging is None or getattr(logging.__spec__, "_initializing", False):
            # (not loaded, or another thread is still loading it: not configured
            # either way; `import` waits for that thread)
            if not load:
                return None
            import logging
        return logging.getLogger(self._name)

    def debug(self, msg: str, *args: object) -> None:
        if (log := self._logger(load=False)) is not None:
            log.debug(msg, *args)

    def info(self, msg: str, *args: object) -> None:
        if (log := self._logger(load=False)) is not None:
            log.info(msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        self._logger(load=True).warning(msg, *args)
