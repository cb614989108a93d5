"""`LocalControlPlane`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
as plain processes on 127.0.0.1 — what envtest does, plus controllers, a scheduler and fake nodes.

Ports are picked at run time, every process runs in its own process group with its log in the
work dir, pids go to the work dir's state file, and `stop()` stops exactly what `start()`
started. A start failure raises `StartError` with the tail of the failing component's log.

kube-apiserver authenticates to admission webhooks with a client certificate signed by the
plane's CA (`--admission-control-config-file`, a WebhookAdmissionConfiguration whose
kubeconfig presents it to every webhook), so a webhook started with `--client-ca <pki>/ca.crt`
accepts the apiserver and refuses unauthenticated callers at TLS.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from gpugov.k8s.devcluster import build, pki
from gpugov.k8s.devcluster.processes import ProcessSet, free_port, log_tail

SERVICE_CIDR = "10.0.0.0/24"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
#: the user name in the client certificate kube-apiserver presents to admission webhooks
WEBHOOK_CLIENT_USER = "gpugov-apiserver-webhook-client"


class StartError(RuntimeError):
    """A component did not become ready; the message ends with the tail of its log."""


class LocalControlPlane:
    """A local Kubernetes control plane in `workdir` (created if needed).

    `scheduler_config`: a KubeSchedulerConfiguration file (its clientConnection.kubeconfig is
    filled in) or True for kube-scheduler's defaults; None starts no kube-scheduler.
    `extra_args`: per component (`kube-apiserver`, ...), additional command-line flags.
    `die_with_parent`: every process gets SIGTERM if this Python process dies (tests).
    `audit`: kube-apiserver writes `<workdir>/audit.log` under gpugov's tenancy audit policy
    (pod creations, Queue/Tenant changes; `gpugov.k8s.tenants.audit`).
    """

    def __init__(self, workdir: Path | str, *, binaries: Path | None = None,
                 controller_manager: bool = True, kwok: bool = True,
                 scheduler_config: Path | bool | None = None,
                 extra_args: dict[str, Sequence[str]] | None = None,
                 progress: Callable[[str], None] | None = None,
                 die_with_parent: bool = False, audit: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.bin = binaries or build.bin_dir()
        self.with_cm = controller_manager
        self.with_kwok = kwok
        self.scheduler_config = scheduler_config
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.say = progress or (lambda _m: None)
        self.pki_dir = self.workdir / "pki"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.procs = ProcessSet(self.workdir)
        self.die_with_parent = die_with_parent
        #: `<workdir>/audit.log` under gpugov's tenancy audit policy (`tenants.audit`)
        self.audit = audit
        self.ca: pki.CertificateAuthority | None = None
        self.api_port = 0
        self.etcd_port = 0

    # ------------------------------------------------------------------ public
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def start(self, timeout: float = 90.0) -> LocalControlPlane:
        """Start every component and wait until each is ready; stop all on failure."""
        missing = build.missing(self._needed(), self.bin)
        if missing:
            raise StartError(f"binaries missing in {self.bin}: {', '.join(missing)}; "
                             "run `gpugov dev build`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            if self.with_cm:
                self._start_controller_manager(timeout)
            if self.scheduler_config is not None and self.scheduler_config is not False:
                self._start_scheduler(timeout)
            if self.with_kwok:
                self._start_kwok(timeout)
        except BaseException:
            self.stop(grace=3)
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM then SIGKILL every process this plane started, newest first."""
        self.procs.stop_all(grace)

    def __enter__(self) -> LocalControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = (),
                       path: Path | None = None) -> Path:
        """A kubeconfig authenticating as `user` in `groups` (a client certificate).

        `pki.service_account_user(ns, name)` gives a ServiceAccount's user and groups, so a
        component can run under exactly the RBAC its ServiceAccount has.
        """
        assert self.ca is not None, "start() first"
        pair = self.ca.client(user, groups)
        safe = user.replace(":", "_").replace("/", "_")
        path = path or self.workdir / f"kubeconfig-{safe}"
        _write_kubeconfig(path, self.server, self.ca.pair.cert, pair, user)
        return path

    @property
    def webhook_client_ca(self) -> Path:
        """The CA that signs the certificate kube-apiserver presents to webhooks (a webhook's
        `--client-ca`)."""
        return self.pki_dir / "ca.crt"

    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the apiserver and presents the admin certificate."""
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def start_process(self, name: str, argv: list[str],
                      ready: Callable[[], bool] | None = None, timeout: float = 60.0) -> None:
        """Start another process (webhook, scheduler) under this plane's bookkeeping."""
        self._start(name, argv)
        if ready is not None:
            self._wait(name, ready, timeout)

    # ------------------------------------------------------------------ steps
    def _start(self, name: str, argv: list[str]) -> None:
        self.procs.start(name, argv, die_with_parent=self.die_with_parent)

    def _needed(self) -> tuple[str, ...]:
        names = ["etcd", "kube-apiserver"]
        if self.with_cm:
            names.append("kube-controller-manager")
        if self.scheduler_config is not None and self.scheduler_config is not False:
            names.append("kube-scheduler")
        if self.with_kwok:
            names.append("kwok")
        return tuple(names)

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self.ca = ca = pki.CertificateAuthority()
        ca.pair.write(self.pki_dir / "ca.crt", self.pki_dir / "ca.key")
        ca.serving("kube-apiserver",
                   dns=("localhost", "kubernetes", "kubernetes.default",
                        "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
                   ips=("127.0.0.1", "10.0.0.1")).write(self.pki_dir / "apiserver.crt",
                                                         self.pki_dir / "apiserver.key")
        admin = ca.client("gpugov-admin", ("system:masters",))
        admin.write(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")
        pki.service_account_keys().write(self.pki_dir / "sa.pub", self.pki_dir / "sa.key")
        self._admin = admin
        self._write_admission_config()

    def _write_admission_config(self) -> None:
        """kube-apiserver's AdmissionConfiguration: both webhook plugins present the client
        certificate `WEBHOOK_CLIENT_USER` (signed by the CA) to every webhook (`name: '*'`)."""
        assert self.ca is not None
        pair = self.ca.client(WEBHOOK_CLIENT_USER)
        kc = self.pki_dir / "webhook-client.kubeconfig"
        kc.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "users": [{"name": "*", "user": {"client-certificate-data": _b64(pair.cert),
                                            "client-key-data": _b64(pair.key)}}]}))
        kc.chmod(0o600)
        cfg = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
               "kubeConfigFile": str(kc)}
        (self.pki_dir / "admission.yaml").write_text(yaml.safe_dump({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": name, "configuration": cfg}
                        for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")]}))

    def _start_etcd(self, timeout: float) -> None:
        self.say("starting etcd")
        self.etcd_port, peer = free_port(), free_port()
        data = self.workdir / "etcd"
        shutil.rmtree(data, ignore_errors=True)
        url = f"http://127.0.0.1:{self.etcd_port}"
        self._start("etcd", [
            str(self.bin / "etcd"), f"--data-dir={data}", f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}", f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn", "--quota-backend-bytes=8589934592",
            *self.extra_args.get("etcd", [])])

        def ok() -> bool:
            body = probe(f"{url}/health", None)
            return body is not None and json.loads(body).get("health") == "true"
        self._wait("etcd", ok, timeout)

    def _start_apiserver(self, timeout: float) -> None:
        self.say("starting kube-apiserver")
        self.api_port = free_port()
        p = self.pki_dir
        audit: list[str] = []
        if self.audit:
            from gpugov.k8s.tenants.audit import write_policy

            policy = write_policy(self.workdir / "audit-policy.yaml")
            audit = [f"--audit-policy-file={policy}",
                     f"--audit-log-path={self.workdir / 'audit.log'}",
                     "--audit-log-maxsize=100", "--audit-log-maxbackup=3"]
        self._start("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--secure-port={self.api_port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}", "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--cert-dir={p / 'apiserver-generated'}",
            f"--admission-control-config-file={p / 'admission.yaml'}", *audit,
            *self.extra_args.get("kube-apiserver", [])])
        _write_kubeconfig(self.kubeconfig, self.server, self.ca.pair.cert, self._admin,
                          "gpugov-admin")
        ctx = self.ssl_context()
        self._wait("kube-apiserver",
                   lambda: probe(f"{self.server}/readyz", ctx) == b"ok", timeout)
        self.procs.extra.update({"server": self.server, "kubeconfig": str(self.kubeconfig)})
        self.procs.save()

    def _start_controller_manager(self, timeout: float) -> None:
        self.say("starting kube-controller-manager")
        port = free_port()
        p = self.pki_dir
        kc = str(self.kubeconfig)
        self._start("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}", f"--cert-dir={p / 'kcm-generated'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller"
            ",-node-route-controller,-persistentvolume-binder,-attachdetach,"
            "-persistentvolume-expander,-ttl",
            *self.extra_args.get("kube-controller-manager", [])])
        self._wait("kube-controller-manager",
                   lambda: probe(f"https://127.0.0.1:{port}/healthz", _insecure()) == b"ok",
                   timeout)

    def _start_scheduler(self, timeout: float) -> None:
        self.say("starting kube-scheduler")
        port = free_port()
        cfg: dict = {"apiVersion": "kubescheduler.config.k8s.io/v1",
                     "kind": "KubeSchedulerConfiguration", "leaderElection":
                     {"leaderElect": False}}
        if isinstance(self.scheduler_config, Path | str):
            cfg = yaml.safe_load(Path(self.scheduler_config).read_text()) or cfg
        conn = cfg.setdefault("clientConnection", {})
        conn["kubeconfig"] = str(self.kubeconfig)
        conn.setdefault("qps", 1000)
        conn.setdefault("burst", 2000)
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        kc = str(self.kubeconfig)
        self._start("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--config={path}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", f"--cert-dir={self.pki_dir / 'sched-generated'}",
            *self.extra_args.get("kube-scheduler", [])])
        self._wait("kube-scheduler",
                   lambda: probe(f"https://127.0.0.1:{port}/healthz", _insecure()) == b"ok",
                   timeout)

    def _start_kwok(self, timeout: float) -> None:
        self.say("starting kwok")
        self._start("kwok", [
            str(self.bin / "kwok"), f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            *self.extra_args.get("kwok", [])])
        # kwok has no listener (we leave --server-address unset); give it a moment to fail fast
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            if not self.procs.procs["kwok"].running():
                raise StartError(f"kwok exited at start; log "
                                 f"{self.procs.procs['kwok'].log}:\n"
                                 f"{log_tail(self.procs.procs['kwok'].log)}")
            time.sleep(0.1)

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        proc = self.procs.procs[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.running():
                raise StartError(f"{name} exited before it was ready; log {proc.log}:\n"
                                 f"{log_tail(proc.log)}")
            try:
                if ready():
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise StartError(f"{name} not ready after {timeout:.0f} s; log {proc.log}:\n"
                         f"{log_tail(proc.log)}")


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def probe(url: str, ctx: ssl.SSLContext | None) -> bytes | None:
    """GET `url`; the stripped body, or None when it cannot be reached (readiness checks)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return resp.read().strip()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write_kubeconfig(path: Path, server: str, ca_pem: bytes, pair: pki.CertPair,
                      user: str) -> None:
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpugov-dev",
        "clusters": [{"name": "gpugov-dev", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": _b64(pair.cert),
                                          "client-key-data": _b64(pair.key)}}],
        "contexts": [{"name": "gpugov-dev", "context": {"cluster": "gpugov-dev",
                                                         "user": user}}],
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)


_get = probe  # earlier name, still imported by bench/k8s_throughput.py
