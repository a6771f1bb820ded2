"""``manage.py stator status [--json]``, ``manage.py stator graph [--format mermaid|dot]`` and
``manage.py stator dashboard [--host] [--port] [--token] [--allowed-host NAME]
[--public-metrics] [--trusted-proxy ADDRESS]``: the ``stator`` CLI's reports and dashboard,
for the project's StatorModels."""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ... import _setup


class Command(BaseCommand):
    help = "Stator reports: `status` (rows per state, due, errors, workers) or `graph`."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="report", required=True)
        status = sub.add_parser("status", help="Rows per model and state, workers, errors.")
        status.add_argument("--json", action="store_true", help="Machine-readable output.")
        graph = sub.add_parser("graph", help="The state graphs as a diagram.")
        graph.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
        web = sub.add_parser("dashboard", help="Serve the web dashboard and /metrics.")
        web.add_argument("--host", default="127.0.0.1",
                         help="Address to listen on; anything but loopback needs a token.")
        web.add_argument("--port", type=int, default=8765)
        web.add_argument("--token", default=os.environ.get("STATOR_DASHBOARD_TOKEN"),
                         help="Every page then needs it, and actions are enabled; also "
                              "from STATOR_DASHBOARD_TOKEN.")
        web.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts",
                         help="A Host name to answer to besides localhost, IP addresses and "
                              "--host; repeatable.")
        web.add_argument("--public-metrics", action="store_true",
                         help="Serve /metrics without the token.")
        web.add_argument("--trusted-proxy", action="append", default=[],
                         dest="trusted_proxies",
                         help="A reverse proxy's address whose X-Forwarded-For/-Proto are "
                              "believed; repeatable (otherwise ignored).")

    def handle(self, *args: Any, **options: Any) -> None:
        from stator._console import user_errors
        from stator.cli.dashboard import serve_dashboard
        from stator.cli.graph import print_graphs
        from stator.cli.status import print_status

        from .runstator import check_or_fail

        if options["report"] == "dashboard":
            with user_errors():
                check_or_fail()
            serve_dashboard(_setup.build_stator, options["host"], options["port"],
                            options["token"], None,
                            allowed_hosts=options["allowed_hosts"],
                            public_metrics=options["public_metrics"],
                            trusted_proxies=options["trusted_proxies"])
            return
        with user_errors():
            check_or_fail()
            stator = _setup.build_stator()
            if options["report"] == "graph":
                print_graphs(stator, options["format"])
                return
            report = stator.status()
        print_status(report, options["json"])
