"""MCP prompts: argument-driven workflows for agents, filled from the platform's state."""
