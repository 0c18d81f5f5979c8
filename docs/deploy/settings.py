# Production settings of a blitzq_django site (docs/deployment.md): added at the end of
# the project's settings.py. scripts/wheel_check.py appends this very file to a fresh
# `django-admin startproject` site and runs `manage.py check --deploy` on it.
import os

DEBUG = False
SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost").split(",")

# Behind nginx or a load balancer that ends TLS and says so in X-Forwarded-Proto.
# DJANGO_INSECURE_HTTP=1 is for a local try without TLS only (check --deploy then warns).
HTTPS = os.environ.get("DJANGO_INSECURE_HTTP") != "1"
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = [f"{'https' if HTTPS else 'http'}://{host}" for host in ALLOWED_HOSTS]
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = 31536000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS

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
    # `def` tasks run on this many threads per worker process, each holding a database
    # connection while it uses the ORM: PROCESSES x THREADS x hosts, plus the web
    # servers, must fit max_connections (check --deploy, blitzq.W004).
    "THREADS": 10,
}
