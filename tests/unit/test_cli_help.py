"""Every command-line flag and argument says what it does (issue 17): walks the whole argparse
tree of ``minikafka`` and of the Spark example jobs."""

from __future__ import annotations

import argparse

from client.cli import build_parser


def _walk(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for name, sub in action.choices.items():
                if name not in helped:
                    missing.append(f"{path} {name} (command)")
                missing += _walk(sub, f"{path} {name}")
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_of_every_command_has_help() -> None:
    missing = _walk(build_parser(), "minikafka")
    assert missing == [], "flags without help text:\n" + "\n".join(missing)


def test_every_flag_of_the_spark_jobs_has_help() -> None:
    from spark_jobs import events_per_key, topic_to_parquet

    missing = _walk(topic_to_parquet.build_parser(), "topic_to_parquet")
    missing += _walk(events_per_key.build_parser(), "events_per_key")
    assert missing == [], "flags without help text:\n" + "\n".join(missing)
