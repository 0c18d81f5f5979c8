"""``blitzq_django.live.routing``, the path docs/dashboard.md teaches for asgi.py: an
alias of ``blitzq_django.web.live.routing``. The dashboard lives in ``web/live/``."""
