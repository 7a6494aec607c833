"""Foreign calls that keep the GIL.

ctypes lets go of the GIL around every foreign call and takes it back afterwards. For a call that
returns in microseconds, the way back is what costs: a thread that took the GIL meanwhile (the
server's event loop streaming the last step's tokens) keeps it until it blocks or a switch
interval (5 ms) has passed. A batching engine's scheduler thread makes such calls between forward
passes, on the path of every step; called through `holding_gil` they cost their own microseconds
and nothing more. Only for calls that never wait: a call that waits for a device or for I/O must
let other threads run meanwhile.
"""

from __future__ import annotations

import ctypes
from typing import Any


def holding_gil(function: Any) -> Any:
    """The same C function as the ctypes binding `function` (argument and result types as it
    declares them), called without releasing the GIL."""
    prototype = ctypes.PYFUNCTYPE(function.restype, *function.argtypes)
    return prototype(ctypes.cast(function, ctypes.c_void_p).value)
