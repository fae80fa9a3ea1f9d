"""Tests of agentlib_sync, the blocking facade."""
