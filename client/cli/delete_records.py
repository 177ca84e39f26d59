"""``minikafka delete-records``: mirrors kafka-delete-records.sh (DeleteRecords, Kafka's api 21).

``--offset-json-file`` names a file in Kafka's format::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}

Every record of each partition below its offset goes (-1: up to the high watermark); the output is
kafka-delete-records', one line per partition: ``partition: T-P<TAB>low_watermark: N`` or
``partition: T-P<TAB>error: ...``. A partition that failed makes the command exit 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import add_connection_args, bootstrap_from_args, print_result, security_from_args
from client.structs import TopicPartition
from proto import errors


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """Kafka's DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup, with its refusals: a
    version other than 1, a malformed entry, a partition listed twice."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise errors.InvalidRequestError(f"the offset JSON file is not JSON: {e}") from None
    if not isinstance(obj, dict) or obj.get("version", 1) != 1:
        raise errors.InvalidRequestError("the offset JSON file must be an object with \"version\": 1")
    entries = obj.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise errors.InvalidRequestError("the offset JSON file has no \"partitions\" to delete records from")
    out: dict[TopicPartition, int] = {}
    duplicates: list[str] = []
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and type(entry.get("partition")) is int and type(entry.get("offset")) is int):
            raise errors.InvalidRequestError(f"not a {{\"topic\", \"partition\", \"offset\"}} entry: {entry!r}")
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in out:
            duplicates.append(f"{tp.topic}-{tp.partition}")
        out[tp] = entry["offset"]
    if duplicates:
        raise errors.InvalidRequestError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser("delete-records", help="delete records below an offset (kafka-delete-records)")
    add_connection_args(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions":[{"topic":T,"partition":P,"offset":O}],"version":1}; offset -1: '
                        "the high watermark")
    p.set_defaults(func=cmd_delete_records)


def cmd_delete_records(args: argparse.Namespace) -> int:
    offsets = parse_offset_json(Path(args.offset_json_file).read_text())
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        results = admin.delete_records(offsets)
    lines = ["Executing records delete operation", "Records delete operation completed:"]
    as_json: dict[str, Any] = {}
    failed = False
    for tp in offsets:
        r = results.get(tp)
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(r, int):
            lines.append(f"partition: {name}\tlow_watermark: {r}")
            as_json[name] = {"low_watermark": r}
        else:
            failed = True
            message = f"{type(r).__name__}: {r}" if r is not None else "no answer"
            lines.append(f"partition: {name}\terror: {message}")
            as_json[name] = {"error": message}
    print_result(args, as_json, "\n".join(lines))
    return 1 if failed else 0
