"""AppDeck: a self-hosted application platform driven by AI agents over MCP."""

from importlib import metadata as _metadata

VERSION = "0.1.0"
"""The release this source tree is: hatch reads it from here into the package's metadata."""


def _installed_version() -> str:
    try:
        return _metadata.version("appdeck")
    except _metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return VERSION


__version__ = _installed_version()
"""The one version string: ``appdeck version``, the serve banner, ``/healthz`` and the MCP
``serverInfo.version`` (unless ``APPDECK_APP_VERSION`` names a deployment's own label)."""
