"""AppDeck: a self-hosted application platform driven by AI agents over MCP."""

__version__ = "0.1.0"
