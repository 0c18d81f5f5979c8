# Production settings of a blitzq_django site (docs/deployment.md): added at the end of
# the project's settings.py. scripts/wheel_check.py appends this very file to a fresh
# `django-admin startproject` site and runs `manage.py check --deploy` on it.
import os

DEBUG = False
SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost").split(",")
CSRF_TRUSTED_ORIGINS = [f"https://{host}" for host in ALLOWED_HOSTS]

# Behind nginx or a load balancer that ends TLS and says so in X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31536000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True

# `manage.py collectstatic` copies the admin's and the dashboard's files here; the web
# server (nginx) serves them under STATIC_URL.
STATIC_ROOT = os.environ.get("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles"))

if os.environ.get("POSTGRES_HOST"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "HOST": os.environ["POSTGRES_HOST"],
            "NAME": os.environ.get("POSTGRES_DB", "mysite"),
            "USER": os.environ.get("POSTGRES_USER", "mysite"),
            "PASSWORD": os.environ.get("POSTGRES_PASSWORD", ""),
            # Task threads hold a connection each while a `def` task runs: keep them
            # short-lived, or size max_connections for them (docs/deployment.md#sizing).
            "CONN_MAX_AGE": 0,
        }
    }

BLITZQ = {
    "REDIS_URL": os.environ["REDIS_URL"],
    # One namespace per project and environment (check blitzq.W010).
    "NAMESPACE": os.environ.get("BLITZQ_NAMESPACE", "mysite"),
    # Seconds a stopping worker lets running attempts finish: the process manager's
    # stop timeout must be longer (TimeoutStopSec, stopwaitsecs, terminationGracePeriodSeconds).
    "SHUTDOWN_TIMEOUT": 30,
}
