"""``nsight.experimental``: Nsight Python 1.1's experimental surface, `collect`.

`collect` only marks a function (its scope and column name); `@kernel(info_collectors=[...])`
reads the marks. Nsight Python may still change this API; so may we, with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from nsight_core.nsight.info_collector import CollectionScope, canonical_scope

F = TypeVar("F", bound=Callable[..., Any])


@overload
def collect(func: F, /, *, scope: CollectionScope | str) -> F: ...
@overload
def collect(func: None = None, /, *, scope: CollectionScope | str) -> Callable[[F], F]: ...
def collect(func: F | None = None, /, *, scope: CollectionScope | str) -> F | Callable[[F], F]:
    """Mark ``func`` as an info collector called at ``scope`` (a `CollectionScope` or its
    value: "once", "config", "run", "annotation"); its column is named after the function.

    Works as ``@collect(scope=...)`` and as ``collect(func, scope=...)``; the function is
    returned unchanged apart from the two marks. A bad scope is a `ValueError` at once.
    """
    value = canonical_scope(scope).value

    def mark(f: F) -> F:
        if not callable(f):
            raise TypeError("collect can only decorate a callable")
        f._nsight_collector_scope = value  # type: ignore[attr-defined]
        f._nsight_collector_name = f.__name__  # type: ignore[attr-defined]
        return f

    return mark if func is None else mark(func)


__all__ = ["CollectionScope", "collect"]
