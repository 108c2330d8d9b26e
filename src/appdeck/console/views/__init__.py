"""The console's pages, one module per part; each a thin reader of the platform's services."""
