"""A small client for Prometheus' HTTP API (instant queries), with errors a user can act on."""

from __future__ import annotations

import math
from dataclasses import dataclass

import aiohttp


class PrometheusError(RuntimeError):
    """Prometheus could not be reached or refused the query; the message says which."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


#: seconds one query may take: the loops' default (a slow answer must not stall the loop)
LOOP_TIMEOUT = 10.0
#: one-shot reports (`rightsize`, `report`): Prometheus' own default `query.timeout`, since a
#: query over a long `--period` and many pods takes Prometheus that long, not a failure
REPORT_TIMEOUT = 120.0


class Prometheus:
    """Instant queries against one Prometheus (`/api/v1/query`)."""

    def __init__(self, url: str, timeout: float = LOOP_TIMEOUT) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--prometheus {url!r}: expected an http:// or https:// URL, "
                             "e.g. http://prometheus:9090")
        self.url = url.rstrip("/")
        self.seconds = timeout
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Prometheus:
        self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def query(self, promql: str, time: float | None = None) -> list[Sample]:
        """Vector result of `promql` (scalars become one unlabelled sample). NaN and ±Inf
        samples are dropped: no gpugov view (bytes, shares, GPU-hours) has a meaning for
        them, and one `+Inf` must not crash `rightsize` or write `inf` into a report."""
        assert self._session is not None, "use `async with Prometheus(url)`"
        params = {"query": promql}
        if time is not None:
            params["time"] = f"{time:.3f}"
        try:
            async with self._session.get(f"{self.url}/api/v1/query", params=params) as resp:
                body = await resp.json(content_type=None)
        except TimeoutError:
            raise PrometheusError(f"Prometheus at {self.url} did not answer query {promql!r} "
                                  f"within {self.seconds:g} s (a long period over many series "
                                  "costs it time: shorten the period, or check the server)"
                                  ) from None
        except (aiohttp.ClientError, ValueError) as e:
            raise PrometheusError(f"Prometheus at {self.url} is unreachable or did not answer "
                                  f"with JSON: {e or type(e).__name__}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error") if isinstance(body, dict) else body
            raise PrometheusError(f"Prometheus at {self.url} refused query {promql!r}: {err}")
        try:
            data = body["data"]
            if data["resultType"] == "scalar":
                value = float(data["result"][1])
                return [Sample({}, value)] if math.isfinite(value) else []
            out = []
            for r in data["result"]:
                value = float(r["value"][1])
                if math.isfinite(value):
                    out.append(Sample(dict(r["metric"]), value))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise PrometheusError(f"Prometheus at {self.url} answered query {promql!r} with "
                                  f"a result gpugov cannot read ({type(e).__name__}: {e})"
                                  ) from None
        return out
