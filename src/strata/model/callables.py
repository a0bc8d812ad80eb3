"""A user's callable as Python sees it: whether it takes one argument, its name, where it is defined.

A template is any callable Spark's session can be passed to alone — a function, one with defaults
(``def build(spark, i=i)`` in a loop), a lambda, a ``functools.partial``, a bound method, an object with
``__call__`` — so what is checked is :func:`inspect.signature` binding one positional argument, not the kind of
object. Errors name it by qualified name and ``file:line`` (a loop's twenty functions share a name; their
lines and bound arguments tell them apart).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable


class Description(str):
    """A description that reads as itself where ``repr()`` is taken (a :class:`DeclarationError`'s found)."""

    def __repr__(self) -> str:
        return str(self)


def takes_one_argument(fn: object) -> bool:
    """Whether ``fn`` can be called with exactly one positional argument (the others have defaults or are bound)."""
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(object())
    except TypeError:  # a required argument left unbound, or no room for the one given
        return False
    except ValueError:  # no signature to inspect (some builtins): Python cannot say; calling it will
        return True
    return True


def _underlying(fn: Callable) -> Callable:
    """The function that runs: through partials, bound methods and ``__wrapped__``, or a callable object's
    ``__call__``."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    if not (inspect.isfunction(fn) or inspect.isbuiltin(fn)) and callable(fn) and not isinstance(fn, type):
        return type(fn).__call__
    return fn


def name_of(fn: Callable) -> str:
    """A short name for ``fn``: the function's own name, through partials, bound methods and callable objects
    (a callable object: its class's name; a lambda: ``lambda``)."""
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    if inspect.ismethod(inner):
        inner = inner.__func__
    if not (inspect.isfunction(inner) or inspect.isbuiltin(inner)) and not isinstance(inner, type):
        return type(inner).__name__
    name = getattr(inner, "__name__", type(inner).__name__)
    return "lambda" if name == "<lambda>" else name


def where_defined(fn: Callable) -> tuple[str | None, int | None]:
    """The file and first line of the code ``fn`` runs; ``(None, None)`` when it has no Python source."""
    code = getattr(_underlying(fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else (None, None)


def source_text(fn: Callable) -> str:
    """The source of the code ``fn`` runs (through partials, bound methods and callable objects); its bytecode
    where no source is kept (an interactive session); a builtin's name."""
    inner = _underlying(fn)
    try:
        return inspect.getsource(inner)
    except (OSError, TypeError):
        code = getattr(inner, "__code__", None)
        return code.co_code.hex() if code is not None else repr(inner)


def describe(fn: object) -> Description:
    """``fn`` named for an error: its qualified name and signature, what a partial binds, and ``file:line``."""
    if not callable(fn):
        return Description(f"{type(fn).__name__} {fn!r}, not callable")
    inner = _underlying(fn)
    qualname = getattr(inner, "__qualname__", type(fn).__qualname__)
    try:
        shown = f"{qualname}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        shown = qualname
    if isinstance(fn, functools.partial):
        bound = [repr(a) for a in fn.args] + [f"{k}={v!r}" for k, v in fn.keywords.items()]
        shown = f"partial({qualname}, {', '.join(bound)}) → {shown}"
    file, line = where_defined(fn)
    return Description(shown + (f" at {file}:{line}" if file is not None else ""))
