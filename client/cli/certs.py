"""``minikafka certs init | issue``: the cluster CA and certificates (:mod:`client.ops.certs`)."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path
from typing import Any

from client.ops.certs import CA_KEY, DEFAULT_HOSTS, CertError, init_ca, issue, write_secret


def add_parser(sub: Any) -> None:
    p = sub.add_parser("certs", help="make a cluster CA and broker/client certificates (PEM)")
    csub = p.add_subparsers(dest="certs_command", metavar="ACTION")
    csub.required = True
    i = csub.add_parser("init", help="make the cluster CA (kept if it exists)")
    i.add_argument("--dir", type=Path, default=Path("certs"), help="where the CA and certificates live")
    i.add_argument("--days", type=int, default=3650, help="validity of the CA certificate")
    i.add_argument("--force", action="store_true", help="replace an existing CA")
    i.add_argument("--brokers", default="", metavar="ID,ID,...",
                   help="also issue broker-<id> certificates (kept if present) for these broker ids")
    i.add_argument("--broker-host", default="broker-{id}", metavar="TEMPLATE",
                   help="the host name a broker is reached by, {id} replaced (default broker-{id})")
    i.add_argument("--zookeeper-digest", action="store_true",
                   help="also make zookeeper.digest (user:random password) for zookeeper.set.acl, if absent")
    i.add_argument("--admin-password", action="store_true",
                   help="also make admin.password (a random password for the admin super user), if absent")
    i.set_defaults(func=_cmd_init)
    s = csub.add_parser("issue", help="a certificate signed by the CA; its common name is the principal")
    s.add_argument("--dir", type=Path, default=Path("certs"), help="the CA's directory (output goes there too)")
    s.add_argument("--name", required=True, help="common name: broker-<id> for a broker, a user name for a client")
    s.add_argument("--host", action="append", default=None,
                   help="a host name or IP the certificate is valid for (repeatable; default 127.0.0.1, localhost)")
    s.add_argument("--days", type=int, default=825, help="validity in days")
    s.set_defaults(func=_cmd_issue)


def _cmd_init(args: argparse.Namespace) -> int:
    path = init_ca(args.dir, days=args.days, force=args.force)
    print(f"CA certificate: {path} (truststore / ssl_cafile); key: {args.dir / CA_KEY}")
    for raw in (x.strip() for x in args.brokers.split(",") if x.strip()):
        if not raw.isdigit():
            raise CertError(f"--brokers: {raw!r} is not a broker id")
        if not (args.dir / f"broker-{raw}.pem").exists():
            host = args.broker_host.replace("{id}", raw)
            ident = issue(args.dir, f"broker-{raw}", hosts=sorted({host, *DEFAULT_HOSTS}))
            print(f"broker-{raw}: {ident.pem}")
    if args.zookeeper_digest and write_secret(args.dir / "zookeeper.digest",
                                              f"minikafka:{secrets.token_urlsafe(18)}\n"):
        print(f"ZooKeeper digest credential: {args.dir / 'zookeeper.digest'}")
    if args.admin_password and write_secret(args.dir / "admin.password", secrets.token_urlsafe(18) + "\n"):
        print(f"admin password: {args.dir / 'admin.password'}")
    return 0


def _cmd_issue(args: argparse.Namespace) -> int:
    ident = issue(args.dir, args.name, hosts=args.host or DEFAULT_HOSTS, days=args.days)
    print(f"{args.name}: {ident.pem} (certificate chain and key: ssl.keystore.location, or a client's "
          f"ssl_certfile and ssl_keyfile); CA: {ident.ca}")
    return 0
