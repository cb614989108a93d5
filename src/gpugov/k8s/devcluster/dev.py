"""`gpugov dev up / down`: a local cluster for users, made of the same parts as the tests.

`up` builds the binaries (once), starts the control plane with kube-scheduler (for pods that are
not gpugov's), creates fake GPU nodes from a cluster file (without one, the built-in mixed
fleet packaged as `gpugov/k8s/data/dev-fleet.yaml`), installs gpugov's CRDs (and
scheduler-plugins' PodGroup, for gangs) and the in-apiserver
admission policies (pod ownership, node scope), starts the admission webhook and
registers it, starts `gpugov scheduler` when this gpugov has it, and creates a default Queue
and a catch-all Tenant so a GPU pod in any namespace is admitted, and starts `gpugov tenants`
(the tenant controller; the catch-all Tenant declares no guardrails, so it fences nothing
until one does). kube-apiserver writes `<workdir>/audit.log` (tenancy audit policy). Every
gpugov component runs
as the chart's ServiceAccount under the chart's RBAC (packaged with gpugov, so this holds from
any install); when those rules cannot be loaded `up` refuses to start, never falling back to
the admin. The kubectl built with the binaries is linked as `<workdir>/bin/kubectl`.
Every process is recorded in the work dir's state file; `down` stops exactly those.

DRA (`dra_pools`, `gpugov dev up --dra-pool NAME`; docs/dra.md, "Install"): those pools' nodes
are labelled `gpugov.io/dra=true` (as are pools the cluster file labels so), the control plane
runs with the alpha gates `DRA_GATES`, the node-scoped slice policy is installed, and `gpugov
dra publish --govern` (slices of the kwok nodes, which have no kubelet plugin, and the
DeviceClasses) and `gpugov dra governor` run as the scheduler's ServiceAccount.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpugov.k8s import crds
from gpugov.k8s.devcluster import build, used_view
from gpugov.k8s.devcluster.client import api_client, create_nodes, wait_nodes_ready
from gpugov.k8s.devcluster.cluster_file import builtin_fleet, load_cluster_file, node_objects
from gpugov.k8s.devcluster.plane import LocalControlPlane, StartError, probe
from gpugov.k8s.devcluster.processes import STATE_FILE, ProcessSet, free_port
from gpugov.k8s.devcluster.rbac import RulesError, apply_component_rbac, load_rules
from gpugov.k8s.power import devcluster as power_dev
from gpugov.k8s.webhook import registration

DEFAULT_QUEUE = "default"
#: the alpha gates the DRA option turns on (kube-apiserver, kube-scheduler, controller
#: manager): soft slices by capacity, and governing kube-scheduler's allocations
DRA_GATES = "--feature-gates=DRAConsumableCapacity=true,DRADeviceBindingConditions=true"
SYSTEM_NAMESPACE = "gpugov-system"
CATCH_ALL_TENANT = "default"


def default_dir() -> Path:
    return build.cache_root().parent / "dev"


def gpugov_argv(*args: str) -> list[str]:
    """Run this gpugov's CLI in a child process (same interpreter, same package): `python -m
    gpugov`, so nothing below the CLI imports it back."""
    return [sys.executable, "-m", "gpugov", *args]


def is_up(workdir: Path) -> bool:
    if not (workdir / STATE_FILE).exists():
        return False
    return any(p.running() for p in ProcessSet.load(workdir).procs.values())


async def install_crds(kubeconfig: Path, timeout: float = 30.0) -> None:
    """Apply gpugov's CRDs and wait until they are Established."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    async with api_client(kubeconfig) as api:
        ext = client.ApiextensionsV1Api(api)
        for crd in crds.generate().values():
            try:
                await ext.create_custom_resource_definition(crd)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                cur = await ext.read_custom_resource_definition(crd["metadata"]["name"])
                crd = {**crd, "metadata": {**crd["metadata"],
                                           "resourceVersion": cur.metadata.resource_version}}
                await ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
        deadline = time.monotonic() + timeout
        for crd in crds.generate().values():
            while True:
                cur = await ext.read_custom_resource_definition(crd["metadata"]["name"])
                conds = {c.type: c.status for c in (cur.status.conditions or [])}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {crd['metadata']['name']} not Established")
                await asyncio.sleep(0.1)
        # a fresh CRD's storage answers 429 "storage is (re)initializing" for a moment
        custom = client.CustomObjectsApi(api)
        for crd in crds.generate().values():
            plural = crd["spec"]["names"]["plural"]
            while True:
                try:
                    await custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, plural,
                                                            limit=1)
                    break
                except ApiException as exc:
                    if exc.status not in (429, 503, 404) or time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.1)


async def install_podgroup_crd(kubeconfig: Path) -> None:
    """scheduler-plugins' PodGroup CRD, so gangs work on a dev cluster as on one running
    scheduler-plugins (gpugov reads `spec.minMember`)."""
    from gpugov.k8s.scheduler import harness
    from gpugov.k8s.scheduler.kube import Kube

    kube = await Kube.from_kubeconfig(kubeconfig)
    try:
        await harness.install_podgroup_crd(kube)
    finally:
        await kube.close()


async def apply_webhook_configurations(kubeconfig: Path, objs: list[dict[str, Any]]) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    async with api_client(kubeconfig) as api:
        reg = client.AdmissionregistrationV1Api(api)
        for obj in objs:
            name = obj["metadata"]["name"]
            create, delete = ((reg.create_mutating_webhook_configuration,
                               reg.delete_mutating_webhook_configuration)
                              if obj["kind"].startswith("Mutating") else
                              (reg.create_validating_webhook_configuration,
                               reg.delete_validating_webhook_configuration))
            try:
                await create(obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                await delete(name)
                await create(obj)


async def create_defaults(kubeconfig: Path) -> None:
    """A root Queue `default` and a catch-all Tenant sending every namespace to it."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    async with api_client(kubeconfig) as api:
        custom = client.CustomObjectsApi(api)
        for plural, body in (
            ("queues", {"apiVersion": crds.API_VERSION, "kind": "Queue",
                        "metadata": {"name": DEFAULT_QUEUE},
                        "spec": {"weight": 1}}),
            ("tenants", {"apiVersion": crds.API_VERSION, "kind": "Tenant",
                         "metadata": {"name": CATCH_ALL_TENANT},
                         "spec": {"namespaceSelector": {}, "queue": DEFAULT_QUEUE,
                                  "trust": "internal"}}),
        ):
            try:
                await custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, plural, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise


def start_webhook(plane: LocalControlPlane, timeout: float = 30.0,
                  kubeconfig: Path | None = None) -> str:
    """Issue a serving cert, start `gpugov webhook` on a free port, return its base URL.
    `kubeconfig`: the identity it runs as (default: the admin). It answers only callers
    holding a certificate of the plane's CA (the apiserver's webhook client certificate)."""
    assert plane.ca is not None
    pair = plane.ca.serving("gpugov-webhook")
    cert, key = plane.pki_dir / "webhook.crt", plane.pki_dir / "webhook.key"
    pair.write(cert, key)
    port = free_port()
    plane.start_process("gpugov-webhook", gpugov_argv(
        "webhook", "--cert", str(cert), "--key", str(key), "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(kubeconfig or plane.kubeconfig),
        "--client-ca", str(plane.webhook_client_ca), "--system-namespace", SYSTEM_NAMESPACE),
        ready=lambda: probe(f"https://127.0.0.1:{port}/healthz", plane.ssl_context()) == b"ok",
        timeout=timeout)
    return f"https://127.0.0.1:{port}"


def check_rules() -> None:
    """StartError unless the packaged RBAC rules load: gpugov's components never run as the
    admin."""
    try:
        load_rules()
    except RulesError as e:
        raise StartError(f"{e}; gpugov's components would have no ServiceAccount rules, and "
                         "`dev up` does not run them as the admin: reinstall gpugov") from None


def _component_kubeconfig(plane: LocalControlPlane, component: str,
                          say: Callable[[str], None]) -> Path:
    """gpugov's own processes run as the chart's ServiceAccounts, under the chart's RBAC (the
    packaged copy); StartError when it cannot be loaded."""
    check_rules()
    say(f"{component}: ServiceAccount {SYSTEM_NAMESPACE}/gpugov-{component}")
    return asyncio.run(apply_component_rbac(plane.kubeconfig, component, SYSTEM_NAMESPACE,
                                            plane.workdir / f"kubeconfig-gpugov-{component}"))


def admission_policies() -> list[dict[str, Any]]:
    """The in-apiserver policies `up` installs: pod ownership (gpugov's annotations), node
    scope (node agents change only their own node and its pods) and tenant fences (only the
    tenant controller changes them, and only them)."""
    from gpugov.k8s.node_policy import node_scope_policies, scheduler_node_policies
    from gpugov.k8s.tenants.policy import all_policies
    from gpugov.k8s.webhook.policy import pod_ownership_policies

    return [*pod_ownership_policies(SYSTEM_NAMESPACE), *node_scope_policies(SYSTEM_NAMESPACE),
            *scheduler_node_policies(SYSTEM_NAMESPACE), *all_policies(SYSTEM_NAMESPACE)]


async def install_policies(kubeconfig: Path) -> None:
    from gpugov.k8s.webhook.policy import apply_policies

    await apply_policies(kubeconfig, admission_policies())


def dra_nodes(objs: list[dict[str, Any]], pools: tuple[str, ...]) -> list[str]:
    """Label the nodes of `pools` `gpugov.io/dra=true` (in place); returns every node so
    labelled, the cluster file's own included. StartError names an unknown pool."""
    from gpugov.k8s.dra.slices import DRA_LABEL

    known = sorted({o["metadata"]["labels"].get("gpugov.io/pool", "") for o in objs})
    for name in pools:
        if name not in known:
            raise StartError(f"--dra-pool {name!r}: no such node pool; pools: "
                             f"{', '.join(known)}")
    out = []
    for o in objs:
        labels = o["metadata"]["labels"]
        if labels.get("gpugov.io/pool") in pools:
            labels[DRA_LABEL] = "true"
        if labels.get(DRA_LABEL) == "true":
            out.append(o["metadata"]["name"])
    return out


def start_dra(plane: LocalControlPlane, sched_kc: Path, say: Callable[[str], None]) -> None:
    """The slice policy, then `gpugov dra publish --govern` and `gpugov dra governor` as the
    scheduler's ServiceAccount (kwok nodes have no kubelet, so no kubelet plugin)."""
    from gpugov.k8s.dra import slice_policy
    from gpugov.k8s.webhook.policy import apply_policies

    say("DRA: the node-scoped ResourceSlice policy")
    asyncio.run(apply_policies(plane.kubeconfig, slice_policy.policies(SYSTEM_NAMESPACE)))
    say("DRA: starting gpugov dra publish (slices, DeviceClasses) and gpugov dra governor")
    plane.start_process("gpugov-dra-publish", gpugov_argv(
        "dra", "publish", "--govern", "--kubeconfig", str(sched_kc)))
    plane.start_process("gpugov-dra-governor", gpugov_argv(
        "dra", "governor", "--kubeconfig", str(sched_kc)))


def up(workdir: Path, nodes: Path | None = None,
       say: Callable[[str], None] = lambda _m: None,
       dra_pools: tuple[str, ...] = ()) -> LocalControlPlane:
    """Bring the whole local cluster up; raises StartError / ClusterFileError / BuildError.
    `dra_pools`: node pools served by DRA (module doc)."""
    workdir = workdir.resolve()
    if is_up(workdir):
        raise StartError(f"a dev cluster is already running in {workdir}; "
                         f"run `gpugov dev down --dir {workdir}` first")
    cluster = load_cluster_file(nodes) if nodes is not None else builtin_fleet()
    node_objs = node_objects(cluster)
    dra = dra_nodes(node_objs, tuple(dra_pools))  # a bad pool: before anything starts
    check_rules()  # before anything starts
    t0 = time.monotonic()
    build.ensure_binaries(progress=say)
    gates = {c: [DRA_GATES] for c in ("kube-apiserver", "kube-scheduler",
                                      "kube-controller-manager")} if dra else None
    plane = LocalControlPlane(workdir, scheduler_config=True, progress=say, audit=True,
                              extra_args=gates)
    plane.start()
    try:
        say("installing CRDs")
        asyncio.run(install_crds(plane.kubeconfig))
        say("installing the PodGroup CRD (scheduler-plugins gangs)")
        asyncio.run(install_podgroup_crd(plane.kubeconfig))
        say("installing admission policies (pod ownership, node scope)")
        asyncio.run(install_policies(plane.kubeconfig))
        say("starting the admission webhook")
        webhook_kc = _component_kubeconfig(plane, "webhook", say)
        url = start_webhook(plane, kubeconfig=webhook_kc)
        asyncio.run(apply_webhook_configurations(
            plane.kubeconfig, registration.configurations(plane.ca.pair.cert, url=url)))
        asyncio.run(create_defaults(plane.kubeconfig))
        say("starting gpugov scheduler")
        sched_kc = _component_kubeconfig(plane, "scheduler", say)
        plane.start_process("gpugov-scheduler", gpugov_argv(
            "scheduler", "--kubeconfig", str(sched_kc), "--lease-namespace", SYSTEM_NAMESPACE))
        if dra:
            start_dra(plane, sched_kc, say)
        say("starting gpugov tenants (each Tenant's fences)")
        tenants_kc = _component_kubeconfig(plane, "tenants", say)
        plane.start_process("gpugov-tenants", gpugov_argv(
            "tenants", "--kubeconfig", str(tenants_kc), "--system-namespace", SYSTEM_NAMESPACE))
        objs, domains = power_dev.with_domains(cluster, node_objs)
        say(f"creating {len(objs)} fake GPU nodes")

        async def make() -> None:
            from kubernetes_asyncio import client

            async with api_client(plane.kubeconfig) as api:
                names = await create_nodes(api, objs)
                await wait_nodes_ready(api, names, timeout=120)
                for d in domains:  # cluster.yaml powerDomains: the racks' budgets
                    await client.CustomObjectsApi(api).create_cluster_custom_object(
                        "gpugov.io", "v1alpha1", "powerdomains", d)
        asyncio.run(make())
        # the used view: SIMULATED series of the kwok nodes (+ Prometheus when installed)
        used_view.start(plane, gpugov_argv, _component_kubeconfig(plane, "reconciler", say),
                        say)
    except BaseException:
        plane.stop(grace=3)
        raise
    plane.procs.extra["up_seconds"] = round(time.monotonic() - t0, 2)
    plane.procs.extra["nodes"] = str(nodes) if nodes is not None else "built-in"
    if dra:
        plane.procs.extra["dra_nodes"] = ",".join(dra)
    plane.procs.save()
    link_kubectl(workdir)
    return plane


def link_kubectl(workdir: Path) -> Path:
    """`<workdir>/bin/kubectl`: a link to the kubectl built with the cluster, so one
    `export PATH` line puts the matching client on the path."""
    target = build.bin_dir() / "kubectl"
    link = workdir / "bin" / "kubectl"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
    return link


def next_steps(workdir: Path) -> list[str]:
    """What `up` prints before the KUBECONFIG line: where kubectl is, what to try."""
    d = "" if workdir == default_dir().resolve() else f" --dir {workdir}"
    return [f"kubectl (v{build.K8S_VERSION}, built for this cluster): "
            f"{workdir / 'bin' / 'kubectl'}",
            f"  export PATH={workdir / 'bin'}:$PATH   # or: gpugov dev kubectl{d} get nodes",
            "next, with the export line below:",
            "  kubectl get nodes -L gpugov.io/pool   # the fleet: built-in, or your --nodes",
            f"  gpugov dev demo{d}   # three teams: borrowing, reclaim, preemption, a summary",
            "  gpugov top --kubeconfig $KUBECONFIG" + _prometheus_option(workdir)
            + "   # queues, devices, offenders"]


def prometheus_url(workdir: Path) -> str | None:
    """The dev cluster's Prometheus (simulated used view), or None when `up` started none."""
    try:
        url = ProcessSet.load(workdir).extra.get(used_view.PROMETHEUS_URL)
    except Exception:  # no state yet, or damaged: `dev down` names it
        return None
    return url if isinstance(url, str) else None


def _prometheus_option(workdir: Path) -> str:
    """` --prometheus URL` of the dev cluster's Prometheus (simulated used view), or ""."""
    url = prometheus_url(workdir)
    # a short rate window: the simulated series are young (rate() divides by the window)
    return f" --prometheus {url} --window 30s" if url else ""


def down(workdir: Path, grace: float = 10.0,
         say: Callable[[str], None] = lambda _step: None) -> list[str]:
    """Stop every process recorded in the work dir; returns their names. `say(step)` before
    each (a process that ignores SIGTERM holds the stop for `grace` seconds)."""
    workdir = workdir.resolve()
    if not (workdir / STATE_FILE).exists():
        return []
    procs = ProcessSet.load(workdir)
    names = list(procs.procs)
    for name in reversed(names):  # as ProcessSet.stop_all: clients first, etcd last
        say(f"stopping {name}")
        procs.stop(name, grace)
    return names
