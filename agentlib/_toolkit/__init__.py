"""What an agent is made of: tools, hooks, session inputs, output types, JSON schemas."""
