"""The API catalogue (issue 12): OpenAPI documents of the apps, their keys, and calls to their
live releases through the ingress."""
