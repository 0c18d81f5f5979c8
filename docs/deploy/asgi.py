# mysite/asgi.py: HTTP to Django, WebSocket to the blitzq dashboard (docs/deployment.md).
# scripts/wheel_check.py serves a fresh project with this file through daphne.
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_application = get_asgi_application()  # first: it sets Django up

from channels.routing import ProtocolTypeRouter  # noqa: E402

from blitzq_django.live.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_application,
    # /ws/blitzq/dashboard/: origin-checked against ALLOWED_HOSTS, staff sessions only.
    "websocket": websocket_application(),
})
