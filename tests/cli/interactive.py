"""Driving an interactive command in a real subprocess: write lines, wait for output, send signals."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time


def _ctrl_c_as_in_a_terminal() -> None:
    """A command started in the background by a non-interactive shell (as `make test` may be)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler; the command
    under test gets Ctrl-C as a terminal would deliver it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Interactive:
    """A running command whose stdout and stderr are collected as they arrive."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            bufsize=0,
            preexec_fn=_ctrl_c_as_in_a_terminal,
        )
        self._buffers = {"out": bytearray(), "err": bytearray()}
        self._lock = threading.Lock()
        for name, pipe in (("out", self.proc.stdout), ("err", self.proc.stderr)):
            threading.Thread(target=self._read, args=(name, pipe), daemon=True).start()

    def _read(self, name: str, pipe) -> None:
        while data := os.read(pipe.fileno(), 4096):
            with self._lock:
                self._buffers[name] += data

    def text(self, name: str) -> str:
        with self._lock:
            return self._buffers[name].decode("utf-8", errors="replace")

    def wait_for(self, name: str, predicate, timeout: float = 180.0) -> str:
        """Wait until `predicate(text)` holds for the stream `name` ("out" or "err")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text(name)
            if predicate(text):
                return text
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the readers drain
                text = self.text(name)
                if predicate(text):
                    return text
                raise AssertionError(f"exited with {self.proc.returncode}; {self._tails()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out; {self._tails()}")

    def _tails(self) -> str:
        return f"stdout: {self.text('out')[-1000:]!r}; stderr: {self.text('err')[-1000:]!r}"

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def finish(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
