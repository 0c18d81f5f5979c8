"""``python -m blitzq_django.engine workflow inspect|cancel APP ID`` (engine/cli/ops.py,
shared with ``manage.py blitzq workflow``) on a real Redis: text, --json, exit codes."""

from __future__ import annotations

import contextlib
import io
import json

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.cli import main as cli
from blitzq_django.engine.client.workflows import chain, chord, group

from .helpers import run_burst


def run(client: Client, *argv: str) -> tuple[int, str, str]:
    """main(["workflow", ACTION, APP, ...]) with this client as APP."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv[:2], "tests:app", *argv[2:]], load=lambda path: client)
    return code, out.getvalue(), err.getvalue()


def test_inspect_and_cancel(redis_broker: RedisBroker) -> None:
    client = Client(redis_broker)

    @client.task(name="jobs.double")
    def double(x: int) -> int:
        return 2 * x

    @client.task(name="jobs.total")
    def total(values: list[int]) -> int:
        return sum(values)

    chord(group(double.s(1), double.s(2)), total.s()).enqueue(workflow_id="basket-7")
    run_burst(client)
    code, out, _ = run(client, "workflow", "inspect", "basket-7", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["state"], doc["done"], doc["total"]) == ("succeeded", 3, 3)
    header, callback = doc["root"]["children"]
    assert [s["result"] for s in header["children"]] == [2, 4]
    assert (callback["task"], callback["result"], callback["path"]) == ("jobs.total", 6, "1")
    code, out, _ = run(client, "workflow", "inspect", "basket-7")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("workflow basket-7  chord  succeeded  3/3 steps")
    # the summary, the header, then the chord, its group and its two steps, the callback
    assert [line.split()[0] for line in lines[1:]] == ["STEP", "chord", "group",
                                                       "jobs.double", "jobs.double",
                                                       "jobs.total"]
    assert lines[5].split()[:4] == ["jobs.double", "succeeded", "0.1", "basket-7.3"]
    assert lines[6].split()[:4] == ["jobs.total", "succeeded", "1", "basket-7.4"]
    assert lines[6].split()[-1] == "6" and lines[5].startswith("    jobs.double")

    waiting = chain(double.s(1), double.s()).enqueue()  # no worker: it waits
    code, out, _ = run(client, "workflow", "cancel", waiting.id)
    assert code == 0 and out.startswith(f"cancelled workflow {waiting.id}")
    assert client.workflows.state(waiting.id) == "cancelled"
    code, out, err = run(client, "workflow", "cancel", waiting.id, "--json")
    assert code == 1 and json.loads(out) == {"id": waiting.id, "before": "cancelled",
                                             "cancelled": False}
    assert "already finished (cancelled)" in err
    code, out, err = run(client, "workflow", "inspect", "nothing-here", "--json")
    assert (code, json.loads(out)) == (1, None)
    assert "nothing is known of workflow 'nothing-here'" in err
    code, _, err = run(client, "workflow", "cancel", "nothing-here")
    assert code == 1 and "nothing is known of workflow" in err
    assert run(client, "workflow", "inspect", "bad id")[0] == 2
    code, _, err = run(client, "workflow", "cancel", "basket-7.3")  # a step's id
    assert code == 2 and "a workflow id is 1 to 100 letters" in err
