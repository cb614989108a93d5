"""A kubeconfig file checked before any component uses it, so a broken, empty or half-written
one is one clear line naming the file and the problem — never a client library's traceback.

The check is structural (what `kubectl` needs to pick a server and a user): a YAML mapping,
a `current-context` that names a context, whose cluster has a `server` and whose user exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: larger than any real kubeconfig (inline certificates included)
MAX_BYTES = 4 * 1024 * 1024


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message names the file and what is wrong."""


def _named(doc: dict[str, Any], key: str, name: str, path: Path) -> dict[str, Any]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise KubeconfigError(f"--kubeconfig {path}: `{key}` is missing or not a list")
    for item in items:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(key[:-1])
            if not isinstance(body, dict):
                raise KubeconfigError(f"--kubeconfig {path}: {key[:-1]} {name!r} has no "
                                      f"`{key[:-1]}` mapping")
            return body
    raise KubeconfigError(f"--kubeconfig {path}: no {key[:-1]} named {name!r}")


def check_kubeconfig(path: Path) -> Path:
    """`path` when it is a usable kubeconfig; KubeconfigError otherwise."""
    if not path.exists():
        raise KubeconfigError(f"--kubeconfig {path}: no such file")
    if not path.is_file():
        raise KubeconfigError(f"--kubeconfig {path}: not a file")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise KubeconfigError(f"--kubeconfig {path}: larger than {MAX_BYTES} bytes; not "
                                  "a kubeconfig")
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"--kubeconfig {path}: cannot be read ({e})") from None
    except (yaml.YAMLError, RecursionError) as e:  # RecursionError: nested too deeply
        raise KubeconfigError(f"--kubeconfig {path}: not valid YAML ({str(e).splitlines()[0]})"
                              ) from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"--kubeconfig {path}: empty or not a kubeconfig (expected a "
                              "mapping with clusters, users, contexts and current-context)")
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError(f"--kubeconfig {path}: no current-context; set one with "
                              "`kubectl config use-context NAME`")
    context = _named(doc, "contexts", current, path)
    cluster = _named(doc, "clusters", str(context.get("cluster", "")), path)
    if not isinstance(cluster.get("server"), str) or not cluster["server"]:
        raise KubeconfigError(f"--kubeconfig {path}: cluster {context.get('cluster')!r} has "
                              "no server URL")
    if context.get("user"):
        _named(doc, "users", str(context["user"]), path)
    return path
