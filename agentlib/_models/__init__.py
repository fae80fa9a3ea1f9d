"""Models: the protocol the engine calls, and the shipped implementations."""
