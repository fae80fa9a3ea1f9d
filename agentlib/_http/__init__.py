"""Deployed sessions: agents served over HTTP, and references to them."""
