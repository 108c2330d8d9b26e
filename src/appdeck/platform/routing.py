"""The ingress routes follow the apps: one route per app, keyed by the app's route key.

A key is ``<app>--<tenant>`` (:mod:`appdeck.model.hostnames`), so creating, renaming,
deleting or restoring an app touches only that app's route: another tenant's app of the
same name has another key and never moves. The deploy engine routes live releases by the
same key (``Release.route``); this module keeps the table in step with the apps themselves.
"""

from __future__ import annotations

import logging

from appdeck.model import hostnames
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.storage.apps import AppRecord

log = logging.getLogger("appdeck.routing")


def route_of(app: AppRecord) -> str:
    """The app's route key."""
    return hostnames.route_label(app.name, app.tenant_id)


class AppRoutes:
    def __init__(self, apps: AppService, router: IngressRouter) -> None:
        self._apps = apps
        self._router = router

    def attach(self, feed: ChangeFeed) -> None:
        """Follow renames, deletions and new apps from now on."""
        self._apps.on_rename(self.moved)
        self._apps.on_delete(self.removed)
        feed.subscribe(self.follow)

    async def restore(self) -> int:
        """After a restart, before reconciling: every app is known (404 until the reconcile
        routes its live release again). An app whose key could be another's (made before the
        hostname rule) gets no route at all. Returns how many apps were routed."""
        routed = 0
        for app in await self._apps.store.all_apps():
            reason = hostnames.unroutable_reason(app.name, app.tenant_id)
            if reason is not None:
                log.error("app %s gets no route: %s", app.id, reason)
                continue
            self._router.unroute(route_of(app))
            routed += 1
        return routed

    def moved(self, old: AppRecord, new: AppRecord) -> None:
        """The app is now reached under its new name; its old hostname stops answering."""
        self._router.move(route_of(old), route_of(new))

    async def removed(self, app: AppRecord) -> None:
        """The app is gone: its hostname answers 404."""
        self._router.forget(route_of(app))
        await self._router.published()  # issue 21: in effect (HAProxy too) once handled

    async def follow(self, change: Change) -> None:
        if change.kind == "app.created":
            app = await self._apps.store.get(change.app_id)
            if app is not None:
                # A new app has no live release. Whatever its key served before (a renamed
                # app's deploy still in flight may have routed its old key) is not this app.
                self._router.unroute(route_of(app))
                await self._router.published()  # "not deployed yet" as soon as it is known
        elif change.kind == "app.updated":  # a rename moved the route (``moved``)
            await self._router.published()  # in effect (HAProxy too) before it is reported
