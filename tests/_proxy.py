"""A loopback TCP proxy that cuts connections part way through their answers."""

from __future__ import annotations

import random

import trio


class CuttingProxy:
    """Forwards each connection to ``port`` on 127.0.0.1; while cuts are left, closes a
    connection once it has passed that many bytes of the server's answer (drawn from
    ``rng`` from ``least`` to below ``most``), in the middle of a response."""

    def __init__(
        self, port: int, cuts: int, rng: random.Random, most: int = 2000, least: int = 0
    ) -> None:
        self.target = port
        self.left = cuts
        self.cut = 0  # connections cut so far
        self._rng = rng
        self._most = most
        self._least = least
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> str:
        """Listen (in ``nursery``) on a free port; the proxy's URL."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._forward, listeners)
        return f"http://127.0.0.1:{self.port}"

    async def _forward(self, client: trio.SocketStream) -> None:
        offset = self._rng.randrange(self._least, self._most) if self.left > 0 else None
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target)
        except OSError:
            await client.aclose()
            return
        async with client, server, trio.open_nursery() as nursery:

            async def up() -> None:
                while data := await client.receive_some():
                    await server.send_all(data)
                await server.send_eof()

            async def down() -> None:
                passed = 0
                while data := await server.receive_some():
                    # A cut is counted when it is made: two connections may have drawn an
                    # offset while one cut was left.
                    if offset is not None and self.left > 0 and passed + len(data) > offset:
                        await client.send_all(data[: offset - passed])
                        self.left -= 1
                        self.cut += 1
                        nursery.cancel_scope.cancel()  # both closed: the answer stops here
                        return
                    passed += len(data)
                    await client.send_all(data)
                nursery.cancel_scope.cancel()

            nursery.start_soon(up)
            nursery.start_soon(down)


class GatewayProxy(CuttingProxy):
    """A reverse proxy whose server is away for its first ``failures`` connections: it
    answers each of them with ``status`` and a text body, as a load balancer does; then
    it forwards."""

    def __init__(self, port: int, failures: int, status: int = 502) -> None:
        super().__init__(port, cuts=0, rng=random.Random(0))
        self.failing = failures
        self.answered = 0  # requests answered with the status
        self._status = status

    async def _forward(self, client: trio.SocketStream) -> None:
        if self.failing <= 0:
            await super()._forward(client)
            return
        self.failing -= 1
        async with client:
            head = b""
            while b"\r\n\r\n" not in head and (data := await client.receive_some()):
                head += data
            body = b"the server is away"
            await client.send_all(
                f"HTTP/1.1 {self._status} Away\r\ncontent-type: text/plain\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            self.answered += 1
