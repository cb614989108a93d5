"""A webhook that does nothing but answer: the floor any Python admission webhook starts from.

It serves /mutate and /healthz over TLS exactly as `gpugov webhook` does (aiohttp, a client
certificate from the apiserver required), reads each AdmissionReview, and answers every pod
with the patch gpugov's webhook gives the benches' GPU pod (annotations, label, schedulerName),
without reading Tenants or deciding anything. `webhook_admission_parts.py --variants null`
runs GPU pods through it: the gap between its ratio and 1.0 is what calling any webhook costs
the apiserver and the machine; the gap between it and the real webhook is gpugov's own work.

    python bench/null_webhook.py --cert C --key K --client-ca CA --listen 127.0.0.1:PORT
                                 [--no-patch | --parts annotations,labels,scheduler]

`--no-patch` allows every pod unchanged: what the call alone costs, without the pod growing.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl

from aiohttp import web

#: the operations of gpugov's patch for the benches' GPU pod, by part (`--parts`)
OPS = {
    "annotations": {"op": "add", "path": "/metadata/annotations", "value": {
        "gpugov.io/request": '{"v":1,"count":1,"mode":"soft","memoryMiB":20000,'
                             '"topology":"preferred"}',
        "gpugov.io/tenant": "default", "gpugov.io/queue": "default",
        "gpugov.io/trust-tier": "trusted"}},
    "labels": {"op": "add", "path": "/metadata/labels", "value": {"gpugov.io/managed": "true"}},
    "scheduler": {"op": "add", "path": "/spec/schedulerName", "value": "gpugov"},
}


def encoded(parts: list[str]) -> str:
    return base64.b64encode(json.dumps([OPS[p] for p in parts]).encode()).decode()


PATCH = encoded(list(OPS))


def handler(patch: str):
    async def mutate(request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        answer = {"uid": review["request"]["uid"], "allowed": True}
        if patch:
            answer.update(patchType="JSONPatch", patch=patch)
        return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                  "kind": "AdmissionReview", "response": answer})
    return mutate


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--client-ca", required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--no-patch", action="store_true", help="allow pods unchanged")
    ap.add_argument("--parts", default=",".join(OPS),
                    help=f"which parts of the patch to send (comma-separated: {', '.join(OPS)})")
    args = ap.parse_args()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.load_verify_locations(cafile=args.client_ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    parts = [p for p in args.parts.split(",") if p]
    if any(p not in OPS for p in parts):
        ap.error(f"--parts: allowed {', '.join(OPS)}")
    app.router.add_post("/mutate", handler("" if args.no_patch else encoded(parts)))
    app.router.add_get("/healthz", healthz)
    host, port = args.listen.rsplit(":", 1)
    web.run_app(app, host=host, port=int(port), ssl_context=ctx, access_log=None, print=None)


if __name__ == "__main__":
    main()
