"""The deploy engine: deploy, roll back, restart, stop, start, scale and cancel an app's
releases, and reconcile after a restart. One class, assembled from one mixin per concern over
:class:`~.core.EngineCore` (its collaborators and the reads every concern shares):

- :class:`~.deploying.Deploying`: ``create`` (the refusals of :class:`~.policy.CorePolicy`,
  in order) and ``run`` (the strategy's :class:`~.policy.Strategy`, then the policy's rules
  for a release going live);
- :class:`~.operations.Operating`: ``rollback`` and ``restart``;
- :class:`~.running.Running`: ``stop``, ``start``, ``scale`` and ``cancel``;
- :class:`~.reconcile.Reconciling`: ``reconcile``, ``reclaim``, ``apply_intents`` and
  ``resync_routes``, which a server runs on its own.

Callers check the role first (:class:`~.deployments.Deployments`, the façade, is the only one
that does): the engine takes the :class:`~appdeck.storage.apps.AppRecord` it loaded.
"""

from __future__ import annotations

from appdeck.platform.deploy.operations import Operating
from appdeck.platform.deploy.reconcile import Reconciling


class DeployEngine(Operating, Reconciling):
    """The one deploy engine (``Operating`` builds on ``Deploying``, ``Reconciling`` on
    ``Running``: each calls the other's methods)."""
