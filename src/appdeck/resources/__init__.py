"""MCP resources: ``appdeck://`` views of the platform, read through the platform services."""
