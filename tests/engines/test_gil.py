"""`holding_gil`: the same C function, called without letting go of the GIL."""

from __future__ import annotations

import ctypes
import threading
import time

from llmflow.engines.gil import holding_gil


def _libc_function(name: str, restype: object, *argtypes: object) -> object:
    function = getattr(ctypes.CDLL(None), name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


def test_the_call_answers_as_the_binding_does():
    strlen = _libc_function("strlen", ctypes.c_size_t, ctypes.c_char_p)
    assert holding_gil(strlen)(b"llmflow") == strlen(b"llmflow") == 7


def test_no_other_thread_runs_during_the_call():
    """`usleep` through the binding lets a spinning thread run all along; through `holding_gil`
    the spinner runs at most around the call (a switch interval or two), not during it."""
    usleep = _libc_function("usleep", ctypes.c_int, ctypes.c_uint)
    spins = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            spins[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.01)
        before = spins[0]
        holding_gil(usleep)(100_000)
        held = spins[0] - before
        before = spins[0]
        usleep(100_000)
        released = spins[0] - before
    finally:
        stop.set()
        spinner.join()
    assert released > 0
    assert held < released / 4
