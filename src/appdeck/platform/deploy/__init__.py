"""Deployments: the state machine, the rollout strategies and the service that runs them."""
