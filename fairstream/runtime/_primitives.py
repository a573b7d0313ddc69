"""anyio's cancel scope and event, built without anyio's look-up of the running library.

``anyio.CancelScope()`` and ``anyio.Event()`` ask which async library runs (sniffio,
then a table of back-ends) every time one is built, which costs two to three times
what building the back-end's own object does (2.9 against 1.1 us for a scope, 3.9
against 1.2 us for an event, ``benchmarks/notes/per_record_cost.md``). What they
return is an instance of the running back-end's class, so building that class
directly gives the same object without the look-up. The hot paths build one per
dispatch (a scope) or per wait (an event); they ask for the classes once, on the
event loop, and build from them.
"""

from __future__ import annotations

import anyio

__all__ = ["Primitives", "primitives"]

Primitives = tuple[type[anyio.CancelScope], type[anyio.Event]]
"""The running back-end's cancel scope class and event class."""


def primitives() -> Primitives:
    """The cancel scope and event classes of the back-end running this task.

    Call it on the event loop (outside one, anyio builds a stand-in event).
    """
    return type(anyio.CancelScope()), type(anyio.Event())
