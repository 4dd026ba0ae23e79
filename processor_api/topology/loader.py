"""Loading a user topology from ``"module:function"``."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
import traceback
from typing import Any

from processor_api.errors import ConfigError, TopologyError, TopologyLoadError
from processor_api.topology import Topology


def _signature_text(function: Any) -> str:
    try:
        signature = inspect.signature(function)
        plain = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        return f"{function.__name__}{plain}"
    except (TypeError, ValueError):
        return getattr(function, "__name__", repr(function))


def _arguments_text(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "none"


def _raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised: `` (at FILE:LINE in FUNCTION)``, the innermost frame of a
    source file (not of the import machinery); for a syntax error, its file and line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (at {exc.filename}:{exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {frame.filename}:{frame.lineno} in {frame.name})"


def check_topology_arguments(reference: str, function: Any, kwargs: dict[str, Any]) -> None:
    """``ConfigError`` naming the argument and the parameters when ``kwargs`` do not bind."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C function: let the call decide
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        parameters = [p for p in signature.parameters.values() if p.kind is not p.VAR_POSITIONAL]
        unknown = [k for k in kwargs if k not in signature.parameters]
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
        if unknown and not accepts_any:
            what = f"unknown topology argument {unknown[0]!r}"
            close = difflib.get_close_matches(unknown[0], [p.name for p in parameters], n=1)
            if close:
                what += f" (did you mean {close[0]!r}?)"
        else:
            what = f"topology arguments do not fit: {exc}"
        raise ConfigError(
            f"{what} for {reference}; its parameters: {_signature_text(function)}"
        ) from None


def load_topology(reference: str, kwargs: dict[str, Any] | None = None) -> Topology:
    """Import ``module`` and call ``function(**kwargs)``; it must return a :class:`Topology`.

    The current directory is searched for ``module`` too (``run-topology mymodule:build``
    finds ``./mymodule.py``). Arguments that do not fit the function's signature, and a
    ``TypeError`` or ``ValueError`` the function raises for them, are ``ConfigError``\\s naming
    the arguments and the function's parameters. Any other exception raised while importing
    the module or calling the function is a :class:`~processor_api.errors.TopologyLoadError`
    naming it and where it was raised (its ``__cause__``), except the ``TopologyError``\\s and
    ``ConfigError``\\s of the topology's own checks, which pass as they are: all of them are
    setup errors, not failures of a run.
    """
    kwargs = dict(kwargs or {})
    module_name, sep, function_name = reference.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(
            f"topology reference {reference!r} must look like MODULE:FUNCTION, "
            "e.g. topologies.sales_aggregation:build_topology"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import module {module_name!r} of {reference!r}: {exc} "
            f"(searched the current directory {cwd} and the Python path)"
        ) from exc
    except Exception as exc:  # the module's own code failed: a setup error, not a crash
        raise TopologyLoadError(
            f"importing module {module_name!r} of {reference!r} raised "
            f"{type(exc).__name__}: {exc}{_raised_at(exc)}"
        ) from exc
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise ConfigError(f"module {module_name!r} has no callable {function_name!r}")
    check_topology_arguments(reference, function, kwargs)
    try:
        topology = function(**kwargs)
    except (TopologyError, ConfigError):
        raise  # the topology's own checks: their messages name the node, store or setting
    except (TypeError, ValueError) as exc:
        if not kwargs:
            raise _build_failed(reference, exc) from exc
        raise ConfigError(
            f"{reference} raised {type(exc).__name__}: {exc} with topology arguments "
            f"{_arguments_text(kwargs)}; its parameters: {_signature_text(function)}"
        ) from exc
    except Exception as exc:
        raise _build_failed(reference, exc) from exc
    if not isinstance(topology, Topology):
        raise ConfigError(
            f"{reference} returned {type(topology).__name__}, expected a processor_api.Topology"
        )
    return topology


def _build_failed(reference: str, exc: Exception) -> TopologyLoadError:
    return TopologyLoadError(
        f"{reference} raised {type(exc).__name__}: {exc} while building the topology"
        f"{_raised_at(exc)}"
    )
