"""The Kubernetes runtime (issue 25 §2). So far its first layer: :mod:`.manifests`, the
objects of one release as plain dicts, pure (it imports only ``appdeck.model`` and
``appdeck.common``); the driver that applies them comes later (docs/kubernetes.md)."""
