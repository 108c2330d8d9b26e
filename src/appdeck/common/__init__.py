"""Values every layer shares: domain errors and the caller's identity.

This package imports nothing else from AppDeck, so every layer (platform included) may use it.
"""
