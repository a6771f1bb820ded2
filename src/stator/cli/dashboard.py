"""``stator dashboard``: the web dashboard (and /metrics), refused on an address others can
reach unless a long enough token guards it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from .._console import out, setup_logging, user_errors
from .._stator import Stator
from ..errors import ConfigError
from ._app import LOG_LEVELS, app_command, control_option, load_app

_MIN_TOKEN = 16  # characters (not counting spaces) of a token guarding a non-loopback address


@click.command()
@app_command
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--token", envvar="STATOR_DASHBOARD_TOKEN", default=None,
              help="Every page then needs it (sign in, or Authorization: Bearer), and actions "
                   "(retry, move, pause) are enabled; also from STATOR_DASHBOARD_TOKEN. "
                   "Without it the dashboard is open and read-only (loopback only).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host name the dashboard answers to besides localhost, IP addresses "
                   "and --host (e.g. the name a reverse proxy forwards); repeatable.")
@click.option("--public-metrics", is_flag=True,
              help="Serve /metrics without the token (for a Prometheus without credentials).")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDRESS",
              help="The address of a reverse proxy whose X-Forwarded-For/-Proto are believed "
                   "(for wrong-token waits and the action log); repeatable. Without it "
                   "those headers are ignored.")
@control_option
@click.option("--log-level", default="WARNING", show_default=True, type=LOG_LEVELS)
def dashboard(
    app: str, db: str | None, host: str, port: int, token: str | None,
    allowed_hosts: tuple[str, ...], public_metrics: bool, trusted_proxies: tuple[str, ...],
    control: Path, log_level: str,
) -> None:
    """Serve a web dashboard (and /metrics) for APP's models."""
    setup_logging(log_level)
    serve_dashboard(lambda: load_app(app, db), host, port, token, control, log_level,
                    allowed_hosts=allowed_hosts, public_metrics=public_metrics,
                    trusted_proxies=trusted_proxies)


def serve_dashboard(
    make: Callable[[], Stator], host: str, port: int, token: str | None, control: Path | None,
    log_level: str = "WARNING", *, allowed_hosts: Iterable[str] = (),
    public_metrics: bool = False, trusted_proxies: Iterable[str] = (),
) -> None:
    """Check, bind and serve the dashboard (``stator dashboard``, ``manage.py stator
    dashboard``): every mistake is one ``error:`` line, exit 2."""
    with user_errors():
        if not token and not _is_loopback(host):
            raise ConfigError(
                f"refusing to serve the dashboard on {host} without a token: anyone who can "
                "reach it could read your rows; pass --token (or STATOR_DASHBOARD_TOKEN), "
                "or use --host 127.0.0.1"
            )
        if token and not _is_loopback(host) and len(token.strip()) < _MIN_TOKEN:
            raise ConfigError(
                f"refusing to serve the dashboard on {host} with a token of fewer than "
                f"{_MIN_TOKEN} characters (not counting spaces): it could be guessed; "
                "use a long random one, e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe())'"
            )
        for proxy in trusted_proxies:
            _check_network(proxy, "--trusted-proxy")
        try:
            import uvicorn

            from ..dashboard import create_app
        except ImportError as exc:
            raise ConfigError(f"the dashboard needs its extra ({exc.name} is missing): "
                              "pip install 'stator-engine[dashboard]'") from None
        stator = make()
        stator.check()
        sock = _listen(host, port)
        web = create_app(stator, token=token or None, launcher_control=control,
                         allowed_hosts=[host, *allowed_hosts], public_metrics=public_metrics)
    out.print(f"Stator dashboard on http://{host}:{sock.getsockname()[1]}/ "
              f"({'sign in with the token; actions enabled' if token else 'read-only'})",
              highlight=False)
    # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise: any local user
    # could then pick a new address per wrong token (no wait) and the action log's "from".
    proxies = list(trusted_proxies)
    config = uvicorn.Config(web, log_level=log_level.lower(), access_log=False,
                            proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)
    uvicorn.Server(config).run(sockets=[sock])


def _check_network(value: str, option: str) -> None:
    import ipaddress

    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ConfigError(f"{option} {value!r} is not an IP address or network") from None


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> Any:
    """A listening socket on host:port, bound here so a port in use is one error line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
