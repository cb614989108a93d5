"""`gpugov crd …`: generate the CRDs, convert config and other schedulers' queues."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import _fail

crd_app = typer.Typer(help="gpugov's CRDs: generate them, convert the config to objects.",
                      no_args_is_help=True)
app.add_typer(crd_app, name="crd")


@crd_app.command("generate")
def crd_generate_cmd(
    out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                    help="output folder (default: print the manifests, for "
                                    "`| kubectl apply -f -`; in a gpugov source checkout, "
                                    "its chart's crds/ folder)"),
) -> None:
    """Write the CRD YAML generated from the config models."""
    from gpugov.k8s.crds import generate, render, write_crds

    chart = Path("deploy/helm/gpugov")
    if out is None and (chart / "Chart.yaml").is_file():
        out = chart / "crds"  # the checkout's own chart: regenerate it in place
    if out is None:
        typer.echo("---\n".join(render(crd) for crd in generate().values()), nl=False)
        return
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} exists and is not a folder")
    try:
        paths = write_crds(out)
    except OSError as e:
        raise _fail(f"--out {out}: cannot write there ({e.strerror or e})") from None
    for path in paths:
        typer.echo(str(path))


@crd_app.command("convert")
def crd_convert_cmd(
    sources: list[Path] = typer.Argument(..., metavar="FILE", help="a config YAML, or "
                                         "YAML streams of "
                                         "objects: gpugov's, KAI Queues, Volcano Queues, "
                                         "Kueue ClusterQueues/LocalQueues/Cohorts"),
    to: str = typer.Option("objects", "--to", help="objects | config"),
    namespace: str = typer.Option("default", "--namespace", "-n", help="namespace of "
                                  "namespaced objects (Kueue LocalQueues) that name none, as "
                                  "kubectl apply -n would give them"),
) -> None:
    """Convert the replay's config YAML to Queue/Tenant/PriorityPolicy objects or back, and
    other schedulers' queue objects (by apiVersion) to gpugov's. What has no gpugov
    equivalent is listed on stderr; an object that cannot be converted fails the command."""
    if to not in ("objects", "config"):
        raise _fail(f"--to {to!r}: allowed: objects, config")
    from gpugov.sim.progress import Steps

    # thousands of queues and tenants take seconds (YAML in and out): steps on stderr
    with Steps("crd convert", "starting") as steps:
        _convert(sources, to, namespace, steps.say)


def _convert(sources: list[Path], to: str, namespace: str, say: Callable[[str], None]) -> None:
    import yaml

    from gpugov.control.config import MAX_SHOWN, ConfigError, load_config, shown
    from gpugov.k8s.convert import convert_objects, is_foreign
    from gpugov.k8s.crds import (
        ConversionError,
        config_sections,
        config_to_objects,
        objects_to_config,
    )
    from gpugov.model.yaml_error import one_line

    docs: list = []
    for source in sources:
        say(f"reading {source}")
        try:
            docs += [d for d in yaml.safe_load_all(source.read_text()) if d is not None]
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
            raise _fail(f"{source}: cannot read YAML: {one_line(e)}") from None
    source = sources[0]
    docs = [i for d in docs for i in (d.get("items") or [] if isinstance(d, dict)
                                      and d.get("kind") == "List" else [d])]
    try:
        if not any(is_foreign(d) for d in docs):  # the replay's config file
            if len(sources) > 1:
                raise _fail("a config file converts alone; give one file")
            if to == "config":
                raise _fail(f"{source}: no objects (apiVersion/kind) to convert to a config")
            say(f"checking the config {source}")
            objects = config_to_objects(load_config(source))
            say(f"writing {len(objects):,} objects as YAML")
            typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
            return
        say(f"converting {len(docs):,} objects")
        conv = convert_objects(docs, namespace)
        for note in conv.notes[:MAX_SHOWN]:
            typer.echo(f"# not carried over / changed: {note.line()}", err=True)
        if len(conv.notes) > MAX_SHOWN:
            typer.echo(f"# ... and {len(conv.notes) - MAX_SHOWN} more not carried over / "
                       "changed", err=True)
        if conv.errors:
            raise _fail("cannot convert:\n  " + "\n  ".join(shown(conv.errors)))
        # validates the result as a whole
        cfg = objects_to_config(conv.objects, ", ".join(map(str, sources)))
        say(f"writing {len(conv.objects):,} objects" if to == "objects" else
            "writing the config")
        if to == "config":
            typer.echo(yaml.safe_dump(config_sections(cfg), sort_keys=False), nl=False)
        else:
            typer.echo(yaml.safe_dump_all(conv.objects, sort_keys=False), nl=False)
    except (ConfigError, ConversionError) as e:
        raise _fail(str(e)) from None
