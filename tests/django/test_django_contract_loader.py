"""The loader of Django's contract tests (django_contract.py): it skips only for want of
a network, and refuses upstream files its adaptation no longer fits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import django_contract


def test_no_network_is_a_reason_to_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLITZQ_CONTRACT_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no local index or wheel folder
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(django_contract.Unavailable, match="no network"):
        django_contract.sdist()
    assert not list(tmp_path.glob("*.tar.gz"))


def test_a_cached_file_of_another_content_is_not_used(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLITZQ_CONTRACT_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    (tmp_path / django_contract.SDIST).write_bytes(b"not the sdist")
    with pytest.raises(django_contract.Unavailable):  # so it downloads again
        django_contract.sdist()


def test_an_upstream_change_the_adaptation_does_not_fit_fails_loudly() -> None:
    good = f'TASKS = {{"default": {{"BACKEND": "{django_contract.DUMMY}"}}}}\n' * 4
    adapted = django_contract._adapt("test_dummy_backend.py", good, backport=False)
    assert django_contract.DUMMY not in adapted
    assert adapted.count('"tests.django.contract_backends.QueuedBackend"') == 4
    with pytest.raises(RuntimeError, match="review the adaptation"):
        django_contract._adapt("test_dummy_backend.py", good * 2, backport=False)
    backport = django_contract._adapt(
        "tasks.py", "from django.tasks.exceptions import InvalidTask, InvalidTaskBackend\n",
        backport=True)
    assert backport.endswith(
        "from django_tasks.exceptions import InvalidTaskError, InvalidTaskBackendError\n")
