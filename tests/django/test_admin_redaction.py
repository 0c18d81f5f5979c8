"""BLITZQ["REDACT"]: secrets in task arguments are masked in the admin, still escaped."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from django.utils import timezone

from blitzq_django import conf
from blitzq_django.engine import TaskRegistry
from blitzq_django.engine.core.task import TaskSpec
from blitzq_django.models import TaskRecord, TaskState

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"


def connect(host: str, password: str, options: dict[str, Any] | None = None) -> None: ...


@pytest.fixture
def staff() -> DjangoClient:
    User.objects.create_superuser("admin", "admin@example.com", "pw")
    browser = DjangoClient()
    browser.login(username="admin", password="pw")
    return browser


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> TaskRegistry:
    registry = TaskRegistry()
    registry.add(TaskSpec.build(connect, name="tests.connect"))
    from blitzq_django import redaction

    monkeypatch.setattr(conf, "registry", registry)  # the admin reads conf.registry
    monkeypatch.setattr(redaction, "registry", registry)
    return registry


def page(browser: DjangoClient, **fields: Any) -> str:
    record = TaskRecord.objects.create(task_id="t1", queue="default", state=TaskState.SUCCEEDED,
                                       created_at=timezone.now(), **fields)
    response = browser.get(f"/admin/blitzq_django/taskrecord/{record.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_secrets_are_masked_and_the_rest_is_escaped(staff: DjangoClient,
                                                    registry: TaskRegistry) -> None:
    html = page(staff, task_name="tests.connect",
                args=["db.example.com", "hunter2-positional"],
                kwargs={"options": {"api_key": "k-123", "note": XSS}, "DB_Password": "pw-456"},
                result={"session_token": "tok-789", "rows": 3})
    for secret in ("hunter2-positional", "k-123", "pw-456", "tok-789"):
        assert secret not in html
    assert "db.example.com" in html and "***" in html
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    record = TaskRecord.objects.get()
    assert record.args[1] == "hunter2-positional"  # display only: the row keeps the value


def test_unknown_task_masks_keyword_arguments_only(staff: DjangoClient) -> None:
    html = page(staff, task_name="gone.task", args=["plain-positional"],
                kwargs={"token": "tok-1"})
    assert "plain-positional" in html and "tok-1" not in html


def test_the_configured_names_are_used(staff: DjangoClient, settings: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "REDACT": ["iban"]}
    html = page(staff, task_name="x", kwargs={"IBAN": "DE44-secret", "password": "shown-pw"})
    assert "DE44-secret" not in html and "shown-pw" in html


def test_broken_settings_still_mask_with_the_defaults_plus_the_given_names(
        staff: DjangoClient, settings: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "CONCURRENCY": 0, "REDACT": ["iban"]}
    html = page(staff, task_name="x", kwargs={"iban": "DE44-secret", "password": "pw-1"})
    assert "DE44-secret" not in html and "pw-1" not in html
