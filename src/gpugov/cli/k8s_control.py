"""The Kubernetes control-plane services: `reconcile`, `tenants`, `scheduler`, `extender`,
`webhook`."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import (
    _fail,
    _finite_nonnegative,
    _kubeconfig_file,
    _label_pairs,
    _listen,
    _policy_name,
    _positive_seconds,
)


@app.command("reconcile")
def reconcile_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    listen: str = typer.Option("0.0.0.0:9402", "--listen", help="HOST:PORT for /metrics"),
    interval: float = typer.Option(15.0, "--interval", callback=_positive_seconds,
                                   help="seconds between cycles"),
    window: str = typer.Option("2m", "--window", help="rate window for device time"),
    idle_threshold: float = typer.Option(0.05, "--idle-threshold", callback=_finite_nonnegative,
                                         help="share of what a pod holds on a device below "
                                         "which it is idle there (0.05: 5 % of a whole GPU, "
                                         "0.5 % of a 0.1 slice)"),
    queues: Path | None = typer.Option(None, "--queues",
                                       help="control-plane config (queue quotas)"),
    max_pods: int = typer.Option(5000, "--max-pods", min=1, max=1_000_000,
                                 help="pods with their own series"),
) -> None:
    """Join declared, allocated and used GPU views per pod/queue/tenant; serve /metrics."""
    import logging
    import re

    from gpugov.control.config import ConfigError
    from gpugov.observe.cluster import ClusterError
    from gpugov.observe.reconciler import Options, load_tree, run

    host, port = _listen(listen)
    if not interval > 0:
        raise _fail(f"--interval must be > 0, got {interval}")
    if not re.fullmatch(r"\d+(ms|s|m|h)", window):
        raise _fail(f"--window {window!r}: expected a Prometheus duration such as 30s or 2m")
    if not 0 <= idle_threshold <= 1:
        raise _fail(f"--idle-threshold must be within 0..1, got {idle_threshold}")
    if max_pods < 1:
        raise _fail(f"--max-pods must be >= 1, got {max_pods}")
    if not prometheus.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {prometheus!r}: expected an http:// or https:// URL")
    _kubeconfig_file(kubeconfig)
    if queues is not None:
        try:
            load_tree(queues)
        except (ConfigError, OSError) as e:
            raise _fail(str(e)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        run(Options(kubeconfig, prometheus, host, port, interval, window, idle_threshold,
                    queues, max_pods))
    except ClusterError as e:
        raise _fail(str(e)) from None
    except OSError as e:  # the listen address is taken or not ours
        raise _fail(f"--listen {listen}: {e.strerror or e}") from None


@app.command("tenants")
def tenants_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    system_namespace: str = typer.Option("gpugov-system", "--system-namespace",
                                         help="gpugov's own namespace (never fenced)"),
    resync: float = typer.Option(30.0, "--resync", callback=_positive_seconds,
                                 help="seconds between full passes (watch events trigger "
                                 "one at once)"),
    tenant_selector: str = typer.Option("", "--tenant-selector",
                                        help="only Tenants with these labels, k=v[,k=v]"),
) -> None:
    """Keep every Tenant's fences (Pod Security labels, quota, limit range, network policies,
    RoleBindings) in its namespaces; report them in the Tenant's status."""
    import asyncio
    import contextlib
    import logging

    from gpugov.k8s.tenants.controller import run

    kc = _kubeconfig_file(kubeconfig)
    selector = dict(_label_pairs(tenant_selector)) if tenant_selector else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(kc, system_namespace, resync, selector))


@app.command("scheduler")
def scheduler_cmd(
    kubeconfig: Path = typer.Option(..., "--kubeconfig", help="kubeconfig file"),
    leader_elect: bool = typer.Option(False, "--leader-elect",
                                      help="run as one of several replicas (Lease)"),
    lease_name: str = typer.Option("gpugov-scheduler", "--lease-name"),
    lease_namespace: str = typer.Option("kube-system", "--lease-namespace"),
    identity: str = typer.Option("", "--identity", help="default: HOSTNAME_PID"),
    lease_duration: float = typer.Option(15.0, "--lease-duration", callback=_positive_seconds,
                                         help="seconds"),
    renew_deadline: float = typer.Option(10.0, "--renew-deadline", callback=_positive_seconds,
                                         help="seconds"),
    retry_period: float = typer.Option(2.0, "--retry-period", callback=_positive_seconds,
                                       help="seconds"),
    policy: str = typer.Option("gpugov", "--policy", help="placement policy"),
    concurrency: int = typer.Option(64, "--concurrency", min=1, max=1024,
                                    help="API writes in flight"),
    events: bool = typer.Option(True, "--events/--no-events",
                                help="post Events for unschedulable and preempted pods"),
    scheduler_name: str = typer.Option("", "--scheduler-name",
                                       help="schedule pods with this schedulerName "
                                            "(default: the one gpugov's webhook sets)"),
    node_selector: str = typer.Option("", "--node-selector",
                                      help="use only nodes with these labels: k=v[,k=v]"),
    metrics_listen: str = typer.Option("", "--metrics-listen",
                                       help="HOST:PORT to serve /metrics on (default: none)"),
) -> None:
    """Schedule pods whose schedulerName is gpugov's: queues, quotas, gangs, preemption."""
    from gpugov.k8s.leader import LeaseTiming
    from gpugov.k8s.scheduler.main import SchedulerOptions, run

    try:
        timing = LeaseTiming(lease_duration, renew_deadline, retry_period)
    except ValueError as e:
        raise _fail(str(e)) from None
    if concurrency < 1:
        raise _fail(f"--concurrency must be >= 1, got {concurrency}")
    code = run(SchedulerOptions(_kubeconfig_file(kubeconfig), _policy_name(policy), leader_elect,
                                lease_name, lease_namespace, identity, timing, concurrency,
                                events=events, scheduler_name=scheduler_name,
                                node_selector=_label_pairs(node_selector),
                                metrics=_listen(metrics_listen) if metrics_listen else None))
    raise typer.Exit(code)


@app.command("extender")
def extender_cmd(
    kubeconfig: Path = typer.Option(..., "--kubeconfig", help="kubeconfig file"),
    listen: str = typer.Option("127.0.0.1:8888", "--listen", help="HOST:PORT"),
    policy: str = typer.Option("gpugov", "--policy", help="placement policy"),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="serving certificate (PEM)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="serving key (PEM)"),
    client_ca: Path | None = typer.Option(
        None, "--client-ca", help="CA (PEM) that signs the client certificate kube-scheduler "
                                  "presents (its extender tlsConfig certFile); others are refused"),
    scheduler_name: str = typer.Option(
        "gpugov", "--scheduler-name",
        help="bind only pods with this schedulerName (the kube-scheduler profile using it)"),
    health_listen: str = typer.Option(
        "", "--health-listen", help="HOST:PORT serving only /healthz over plain HTTP (probes)"),
    insecure_http: bool = typer.Option(
        False, "--insecure-http",
        help="serve plain HTTP without authentication: local debugging only"),
) -> None:
    """kube-scheduler extender (filter/prioritize/bind) placing GPUs with gpugov's engine.

    HTTPS with a client certificate signed by --client-ca is required; it binds only pods of
    --scheduler-name that it filtered, onto a node it accepted, within their queue's limits."""
    import asyncio
    import contextlib
    import logging

    from gpugov.k8s.extender import TlsFiles, serve

    host, port = _listen(listen)
    health = _listen(health_listen) if health_listen else None
    path = _kubeconfig_file(kubeconfig)
    name = _policy_name(policy)
    tls = None
    given = {"--tls-cert": tls_cert, "--tls-key": tls_key, "--client-ca": client_ca}
    if insecure_http:
        if any(given.values()):
            raise _fail("--insecure-http cannot be combined with --tls-cert/--tls-key/"
                        "--client-ca")
    else:
        missing = [k for k, v in given.items() if v is None]
        if missing:
            raise _fail(f"the extender serves HTTPS and authenticates its caller: give "
                        f"{', '.join(missing)} (or --insecure-http for local debugging only)")
        for option, file in given.items():
            if not file.is_file():  # type: ignore[union-attr]
                raise _fail(f"{option} {file}: no such file")
        tls = TlsFiles(tls_cert, tls_key, client_ca)  # type: ignore[arg-type]
        try:
            tls.context()
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            raise _fail(f"--tls-cert/--tls-key/--client-ca: {e}") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(path, host, port, name, tls=tls, insecure_http=insecure_http,
                          scheduler_name=scheduler_name, health=health))


@app.command("webhook")
def webhook_cmd(
    cert: Path = typer.Option(..., "--cert", help="serving certificate (PEM)"),
    key: Path = typer.Option(..., "--key", help="serving key (PEM)"),
    listen: str = typer.Option("127.0.0.1:8443", "--listen",
                               help="HOST:PORT (in a pod: 0.0.0.0:8443, as the chart sets)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    scheduler_name: str = typer.Option("gpugov", "--scheduler-name",
                                       help="schedulerName set on GPU pods ('' = leave it)"),
    client_ca: Path | None = typer.Option(None, "--client-ca", help="require TLS client "
                                          "certificates signed by this CA (the apiserver's)"),
    system_namespace: str = typer.Option("gpugov-system", "--system-namespace",
                                         help="namespace of gpugov's component "
                                         "ServiceAccounts (they may write what gpugov owns)"),
) -> None:
    """The admission webhook: translate GPU requests, resolve tenancy, refuse clearly."""
    import asyncio
    import contextlib
    import logging
    import os

    from gpugov.k8s.webhook.server import serve, ssl_context

    host, port = _listen(listen)
    for name, path in (("--cert", cert), ("--key", key), ("--client-ca", client_ca)):
        if path is not None and not path.is_file():
            raise _fail(f"{name} {path}: no such file")
    _kubeconfig_file(kubeconfig)
    try:  # the certificate, key and CA are read before anything starts
        ssl_context(cert, key, client_ca)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise _fail(f"--cert {cert} / --key {key}"
                    + (f" / --client-ca {client_ca}" if client_ca else "")
                    + f": not a usable PEM certificate, key and CA ({e})") from None
    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise _fail("no --kubeconfig, and not running in a pod (KUBERNETES_SERVICE_HOST is "
                    "unset): give --kubeconfig FILE")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(cert, key, host, port, kubeconfig, scheduler_name,
                              client_ca=client_ca, system_namespace=system_namespace))
    except OSError as e:  # the address is in use or cannot be bound
        raise _fail(f"--listen {listen}: cannot listen there ({e.strerror or e})") from None
