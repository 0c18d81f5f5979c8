"""The import paths the docs teach keep working after the code moved into packages
(web/, testing/): each is an alias of the module the code lives in."""

from __future__ import annotations

import importlib

from blitzq_django import progress, urls
from blitzq_django.live import routing
from blitzq_django.web import progress as web_progress
from blitzq_django.web import urls as web_urls
from blitzq_django.web.live import routing as web_routing


def test_urls_include_the_same_routes() -> None:
    assert urls.urlpatterns is web_urls.urlpatterns


def test_progress_names_are_the_web_ones() -> None:
    for name in progress.__all__:
        assert getattr(progress, name) is getattr(web_progress, name), name
    # the default of BLITZQ["PROGRESS_PERMISSION"] names this path
    assert importlib.import_module("blitzq_django.progress").owner_or_viewer \
        is web_progress.owner_or_viewer


def test_dashboard_routing_for_asgi_py() -> None:
    assert routing.websocket_application is web_routing.websocket_application
    assert routing.websocket_urlpatterns is web_routing.websocket_urlpatterns


def test_testing_names_and_the_plugin_path() -> None:
    testing = importlib.import_module("blitzq_django.testing")
    for name in testing.__all__:
        assert getattr(testing, name) is not None
    plugin = importlib.import_module("blitzq_django.testing.pytest_plugin")
    old = importlib.import_module("blitzq_django.pytest_plugin")
    assert (old.blitzq, old.blitzq_eager) == (plugin.blitzq, plugin.blitzq_eager)
