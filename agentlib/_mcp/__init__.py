"""MCP servers as tool sources: their declarations, connections and results."""
