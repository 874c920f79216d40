"""`manage.py metrics_exporter`: this machine's metrics over HTTP, for a machine that runs
workers but no web process (a web process serves its machine's at `/metrics`).

prometheus-client's own server, reading the samples of every process of this machine
(PROMETHEUS_MULTIPROC_DIR). It has no login: bind it to an address only your Prometheus reaches
(the default is 127.0.0.1).
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from core.metrics import metrics_dir


class Command(BaseCommand):
    help = "Serve this machine's Prometheus metrics (for machines running only workers)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=9464)

    def handle(self, *args: Any, **options: Any) -> None:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(metrics_dir()))  # type: ignore[no-untyped-call]
        server, thread = start_http_server(options["port"], options["host"], registry)
        self.stdout.write(
            f"Metrics of {metrics_dir()} at http://{options['host']}:{options['port']}/metrics"
        )
        try:
            while thread.is_alive():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
