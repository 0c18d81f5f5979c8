"""Settings of the example project: SQLite by default, PostgreSQL when asked.

Environment:
  REDIS_URL        a Redis server; unset: an embedded one (testproject.embedded_redis)
  DATABASE_URL     postgres://user:pass@host:port/name  -> PostgreSQL
  BLITZQ_TEST_DB   "postgres" -> PostgreSQL at 127.0.0.1:5432, user postgres, db test
  BLITZQ_SQLITE    path of the SQLite file (default: .demo/db.sqlite3 in the checkout)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from testproject import embedded_redis

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "testproject-insecure-key-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Before "channels": both apps have a runworker command and the first listed wins.
    "blitzq_django",
    "channels",
    "testproject.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"
ASGI_APPLICATION = "testproject.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict[str, object]:
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(url)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/") or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    if os.environ.get("BLITZQ_TEST_DB") == "postgres":
        return {"ENGINE": "django.db.backends.postgresql", "NAME": "test", "USER": "postgres",
                "HOST": "127.0.0.1", "PORT": "5432"}
    path = Path(os.environ.get("BLITZQ_SQLITE") or BASE_DIR / ".demo" / "db.sqlite3")
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            # Worker threads write while other processes read: WAL lets readers go on,
            # IMMEDIATE takes the write lock up front instead of failing mid-transaction.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # Tests: a file, not the default in-memory database. Worker threads write through
        # their own connections, and a shared-cache memory database answers "table is
        # locked" at once instead of waiting. One file per test process.
        "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"blitzq-test-{os.getpid()}.sqlite3")},
    }


DATABASES = {"default": _database()}
# Persistent connections (seconds) apply to worker threads as to request threads:
# runworker calls close_old_connections() around every `def` task.
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("DJANGO_CONN_MAX_AGE", "0"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

BLITZQ = {
    # A callable: the embedded server starts only when a client is first built.
    "REDIS_URL": os.environ.get("REDIS_URL") or embedded_redis.url,
    "NAMESPACE": os.environ.get("BLITZQ_NAMESPACE", "testproject"),
    "QUEUES": ["default"],
}

# The dashboard's socket needs no layer (its fan-out is in-process); any works. Set
# CHANNEL_LAYER=redis for channels-redis on REDIS_URL (its keys start with "asgi").
if os.environ.get("CHANNEL_LAYER") == "redis" and os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [os.environ["REDIS_URL"]]}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"blitzq": {"handlers": ["console"], "level": "WARNING"}},
}
