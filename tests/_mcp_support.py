"""What the MCP tests share: the test server (tests/_mcp_server.py) run over stdio or over
HTTP, and an observer of what it does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agentlib

#: The image the test server's ``blocks`` tool returns.
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8

SERVER = str(Path(__file__).resolve().parent / "_mcp_server.py")


class Observer:
    """The lines the test servers send as they act (``call echo``, ``cancelled ...``), over
    a socket on 127.0.0.1, each server process on a connection of its own; waits block
    (in trio tests, run them with ``trio.to_thread.run_sync``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        with connection, connection.makefile() as lines:
            for line in lines:
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()

    def wait_for(self, line: str, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until ``line`` has come ``count`` times; only a hang meets ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.lines.count(line) >= count, timeout):
                raise TimeoutError(f"{line!r} did not come {count} times: {self.lines[-20:]}")

    def pids(self) -> list[int]:
        """The server processes that started."""
        return [int(line.split()[1]) for line in list(self.lines) if line.startswith("started")]

    def close(self) -> None:
        self._listener.close()


def server_env(log: Path, observer: Observer, **more: str) -> dict[str, str]:
    return {"MCP_TEST_LOG": str(log), "MCP_TEST_OBSERVER": str(observer.port), **more}


def stdio_server(log: Path, observer: Observer, **options: Any) -> agentlib.StdioMCP:
    env = server_env(log, observer, **options.pop("env", {}))
    return agentlib.StdioMCP(command=[sys.executable, SERVER, "stdio"], env=env, **options)


def log_lines(log: Path, line: str) -> int:
    """How many times the server wrote ``line`` to its log (written before it answers)."""
    return log.read_text().splitlines().count(line) if log.exists() else 0


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been waited for (no zombie left)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class HTTPServer:
    """The test server over streamable HTTP on 127.0.0.1, in a process of its own."""

    def __init__(self, log: Path, observer: Observer) -> None:
        env = {**os.environ, **server_env(log, observer)}
        self.process = subprocess.Popen(
            [sys.executable, SERVER, "http"], stdout=subprocess.PIPE, env=env, text=True
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def drop_sessions(self) -> None:
        """Make the server forget its sessions, as a restart would: their next request
        gets 404."""
        import httpx

        httpx.post(f"http://127.0.0.1:{self.port}/drop").raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def http_server(log: Path, observer: Observer) -> Iterator[HTTPServer]:
    server = HTTPServer(log, observer)
    try:
        yield server
    finally:
        server.stop()
