"""What an agent talks to: its run's door (agent.sock) and the MCP server over it."""
