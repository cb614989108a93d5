"""The apiserver audit policy for tenancy: who created which pod, who changed Queues/Tenants.

kube-apiserver takes it with `--audit-policy-file` (and `--audit-log-path`); `gpugov dev up`
turns it on (`<workdir>/audit.log`), docs/tenancy.md shows it for a real cluster. An audit
policy cannot select on a pod's resources, so every pod creation is recorded at `Request`
level (the body holds its GPU request and namespace: a report joins it to the namespace's
Tenant); Queue and Tenant changes at `RequestResponse` (who changed what, and the result).
Status writes (the scheduler's Queue usage, the controller's Tenant conditions) and reads are
not recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

WRITES = ["create", "update", "patch", "delete", "deletecollection"]


def policy() -> dict[str, Any]:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "RequestResponse", "verbs": WRITES,
                 "resources": [{"group": "gpugov.io", "resources": ["queues", "tenants"]}]},
                {"level": "Request", "verbs": ["create"],
                 "resources": [{"group": "", "resources": ["pods"]}]},
                {"level": "Metadata", "verbs": ["delete", "deletecollection"],
                 "resources": [{"group": "", "resources": ["pods"]}]},
                {"level": "None"}]}


def write_policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump(policy(), sort_keys=False))
    return path
