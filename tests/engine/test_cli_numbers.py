"""The worker command line refuses bad numbers at parse time, naming the flag."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from blitzq_django.engine import Client, ConfigurationError
from blitzq_django.engine.cli import main as cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    cli.add_worker_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(("flag", "value"), [
    ("--visibility-timeout", "nan"), ("--visibility-timeout", "inf"),
    ("--visibility-timeout", "0"), ("--shutdown-timeout", "nan"),
    ("--shutdown-timeout", "-1"), ("--threads", "-1"), ("--threads", "1.5"),
    ("--concurrency", "0"), ("--prefetch", "-1"), ("--batch-size", "0"),
    ("--processes", "0"), ("--max-tasks-per-child", "-1"),
    ("--max-memory-per-child", "-1"), ("--max-deliveries", "nan"), ("--max-deliveries", "0"),
    ("--time-limit-grace", "nan"), ("--time-limit-grace", "-1"),
])
def test_a_bad_number_is_an_argparse_error_naming_the_flag(flag: str, value: str) -> None:
    with pytest.raises(argparse.ArgumentError) as info:
        parse(f"{flag}={value}")
    assert flag in str(info.value) and "must be" in str(info.value)


def test_good_numbers_parse_to_the_right_types() -> None:
    args = parse("--visibility-timeout", "2.5", "--threads", "0", "--shutdown-timeout", "0",
                 "--processes", "2", "--max-memory-per-child", "512", "--time-limit-grace", "1.5")
    assert (args.visibility_timeout, args.threads, args.shutdown_timeout) == (2.5, 0, 0.0)
    config = cli.worker_config(vars(args))
    assert config.visibility_timeout == 2.5 and config.max_memory_mb == 512
    assert config.time_limit_grace == 1.5


@pytest.mark.parametrize(("options", "named"), [
    ({"threads": -1}, "threads"), ({"visibility_timeout": float("nan")}, "visibility_timeout"),
    ({"processes": 0}, "--processes"), ({"max_tasks_per_child": -3}, "max_tasks"),
])
def test_worker_config_checks_options_that_skipped_argparse(options: dict[str, Any],
                                                            named: str) -> None:
    # call_command("runworker", threads=-1) hands values over without the argparse types.
    with pytest.raises(ConfigurationError, match=named):
        cli.worker_config(options)


def test_main_prints_the_flag_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    def load(path: str) -> Client:
        raise AssertionError("must not get this far")

    with pytest.raises(SystemExit) as info:
        cli.main(["worker", "x:client", "--visibility-timeout", "nan"], load=load)
    assert info.value.code == 2
    assert "argument --visibility-timeout: must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["", "a b", "x\nCRITICAL forged", "n" * 201, 5])
def test_worker_name_is_checked(name: object) -> None:
    from blitzq_django.engine import WorkerConfig

    with pytest.raises(ConfigurationError, match="name must be"):
        WorkerConfig(name=name)  # type: ignore[arg-type]
