"""The ``python -m agentlib`` command line, and its demo."""
