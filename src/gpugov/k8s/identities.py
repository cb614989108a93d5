"""Who gpugov's own components are, as the apiserver names them (`request.userInfo`).

Ownership rules (the admission policies, the webhook's UPDATE check) let exactly these
identities write what gpugov owns. A ServiceAccount is pinned to its namespace: a tenant with
the `edit` role can create a ServiceAccount called `gpugov-scheduler` in its own namespace,
so a name alone proves nothing. Members of `system:masters` (cluster admins) may always write:
they can change any rule anyway.
"""

from __future__ import annotations

#: the namespace gpugov's components run in (the chart's release namespace; `gpugov dev up`)
SYSTEM_NAMESPACE = "gpugov-system"
#: the chart's component ServiceAccounts are `<release>-<component>`
COMPONENTS = ("scheduler", "webhook", "node", "reconciler")
RELEASE = "gpugov"
#: the group of cluster administrators (always allowed)
ADMIN_GROUP = "system:masters"


def service_account(component: str, namespace: str = SYSTEM_NAMESPACE,
                    release: str = RELEASE) -> str:
    """`system:serviceaccount:<namespace>:<release>-<component>`."""
    if component not in COMPONENTS:
        raise ValueError(f"component {component!r}; allowed: {', '.join(COMPONENTS)}")
    return f"system:serviceaccount:{namespace}:{release}-{component}"


def component_users(namespace: str = SYSTEM_NAMESPACE, release: str = RELEASE,
                    components: tuple[str, ...] = COMPONENTS) -> tuple[str, ...]:
    """The usernames of gpugov's components in `namespace`."""
    return tuple(service_account(c, namespace, release) for c in components)


def is_gpugov(user: str, groups: list[str] | tuple[str, ...] | None,
              namespace: str = SYSTEM_NAMESPACE, release: str = RELEASE) -> bool:
    """True for gpugov's own components and cluster admins."""
    return user in component_users(namespace, release) or ADMIN_GROUP in (groups or ())
