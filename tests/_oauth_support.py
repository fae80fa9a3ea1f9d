"""What the sign-in tests share: tests/_oauth_server.py run as a process of its own (an
authorization server and the MCP server that trusts it), and a browser that signs in."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

SERVER = str(Path(__file__).resolve().parent / "_oauth_server.py")


class OAuthServers:
    """The authorization server and the MCP server, on two ports of 127.0.0.1."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SERVER, "http"], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        issuer, resource = self.process.stdout.readline().split()
        self.issuer = f"http://127.0.0.1:{issuer}"
        self.url = f"http://127.0.0.1:{resource}/mcp"

    async def sign_in(self, authorization_url: str, user: str = "alice") -> str:
        """Open ``authorization_url`` as ``user``'s browser would; the address the
        authorization server redirects it to (which holds the code)."""
        # Appended: httpx's params= would replace the URL's query.
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{authorization_url}&login_hint={user}")
        assert response.status_code == 302, response.text
        return response.headers["location"]

    def tokens(self) -> list[str]:
        """The access and refresh tokens the authorization server issued."""
        found: list[str] = httpx.get(f"{self.issuer}/debug/tokens").json()["tokens"]
        return found

    def counters(self) -> dict[str, int]:
        """How many registrations, authorizations and token requests it saw."""
        counted: dict[str, int] = httpx.get(f"{self.issuer}/debug/counters").json()
        return counted

    def revoke(self) -> None:
        """Revoke every token the authorization server issued."""
        httpx.post(f"{self.issuer}/debug/revoke").raise_for_status()

    def stop(self) -> None:
        try:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a connection it still waits on to close
                self.process.kill()
                self.process.wait(timeout=30)
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()


def oauth_servers() -> Iterator[OAuthServers]:
    servers = OAuthServers()
    try:
        yield servers
    finally:
        servers.stop()


def stdio_command() -> list[str]:
    """The same tools over stdio, with no sign-in."""
    return [sys.executable, SERVER, "stdio"]
