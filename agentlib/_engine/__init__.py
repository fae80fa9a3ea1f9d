"""The trio engine: the runtime, sessions' state and logs, and the turn loop."""
