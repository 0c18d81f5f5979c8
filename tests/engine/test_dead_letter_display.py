"""Dead letters are shown with secrets masked, and still replay with the real arguments."""

from __future__ import annotations

from blitzq_django.engine import Client
from blitzq_django.engine.client.dead_letters import shown
from blitzq_django.engine.core.redact import MASK

from .helpers import run_burst


def test_shown_masks_secrets_and_replay_keeps_them(client: Client) -> None:
    seen: list[tuple[str, str, str]] = []
    fixed = False

    @client.task(name="jobs.login", retries=0)
    def login(user: str, password: str, *, token: str = "") -> None:
        seen.append((user, password, token))
        if not fixed:
            raise RuntimeError("login refused")

    handle = login.enqueue("bob", "hunter2", token="tok-1")
    run_burst(client)
    (letter,) = client.dead_letters.list()
    view = client.dead_letters.shown(letter)
    assert view["args"] == ["bob", MASK] and view["kwargs"] == {"token": MASK}
    assert view["reason"] == letter.reason and "payload" not in view
    assert b"hunter2" in letter.payload  # the stored dead letter is untouched

    # Without the registry the positional secret has no name: only keywords are masked.
    assert shown(letter)["args"] == ["bob", "hunter2"]
    assert shown(letter, ["user"], client.registry)["args"] == [MASK, "hunter2"]

    fixed = True
    assert client.dead_letters.replay(handle.id) == 1
    run_burst(client)
    assert seen[-1] == ("bob", "hunter2", "tok-1")
