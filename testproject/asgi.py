import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django_application = get_asgi_application()  # before anything that imports models

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from blitzq_django.live.routing import websocket_application  # noqa: E402
from blitzq_django.progress import websocket_urlpatterns as progress_routes  # noqa: E402

if settings.DEBUG:  # daphne serves the admin's and the dashboard's static files too
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_application = ASGIStaticFilesHandler(django_application)

# HTTP: Django; WebSocket: the blitzq dashboard (origin-checked, the admin session's user).
application = ProtocolTypeRouter({"http": django_application,
                                  "websocket": websocket_application(extra=progress_routes)})
