"""The agent, and the definition the engine and the references read."""
