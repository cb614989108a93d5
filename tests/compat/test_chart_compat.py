"""The chart carries the migration knobs to the webhook: the adoption list and HAMi's
resource-renaming keys (same names as HAMi's chart) become the env the webhook reads, and
renamed resources reach the webhook through its match condition."""

from __future__ import annotations

from pathlib import Path

from tests.k8s.test_chart import render

from gpugov.k8s.webhook import admission, registration

EXAMPLES = Path(__file__).parents[2] / "deploy" / "helm" / "examples"


def _webhook(docs: list[dict]) -> tuple[dict[str, str], str]:
    dep = next(d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["name"].endswith("-webhook"))
    env = {e["name"]: e["value"]
           for e in dep["spec"]["template"]["spec"]["containers"][0].get("env") or []}
    hook = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    return env, hook["webhooks"][0]["matchConditions"][0]["expression"]


def test_default_chart_adopts_nothing_and_matches_the_code(helm):  # noqa: F811
    env, cel = _webhook(render(helm))
    assert env == {}  # no adoption, no renames: the webhook's defaults
    assert cel == registration.GPU_POD_CONDITION


def test_migration_values_adopt_their_scheduler(helm):  # noqa: F811
    for name, sched in (("hami", "hami-scheduler"), ("kai", "kai-scheduler"),
                        ("volcano", "volcano")):
        env, _ = _webhook(render(helm, "-f", str(EXAMPLES / f"values-{name}-migration.yaml")))
        assert admission.Options.from_env(env).adopt == (sched,)


def test_hamis_renaming_knobs_reach_the_webhook(helm):  # noqa: F811
    env, cel = _webhook(render(helm, "--set", "resourceName=example.com/vgpu",
                               "--set", "resourceMem=example.com/vmem",
                               "--set", "resourceCores=example.com/vcores"))
    names = admission.Options.from_env(env).names
    assert (names.gpu, names.gpumem, names.gpucores) == (
        "example.com/vgpu", "example.com/vmem", "example.com/vcores")
    assert names.gpumem_percentage == "nvidia.com/gpumem-percentage"
    for n in ("example.com/vgpu", "example.com/vmem", "example.com/vcores"):
        assert cel.count(f"k == '{n}'") == 2  # limits and requests
