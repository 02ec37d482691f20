"""Headless Chromium driven through the DevTools protocol, for checking the Prefect UI and the Dask
dashboard.

The UI is a single-page app: a page "loads" when its text appears, and what can go wrong is
mostly in the API calls it makes and in uncaught script errors. ``Chromium.visit`` opens a URL,
waits for the expected text and records every API response with an error status, every
request that failed, every uncaught exception and every console error of the page.

We speak the protocol over ``websockets`` (already a Prefect dependency) rather than
Playwright: Playwright's driver is built against one Chromium revision and would be paired
here with Debian's, and the four protocol domains used (Page, Network, Runtime, Log) are
stable across Chromium releases. Debian's ``chromium`` package provides the browser; nothing
is downloaded.

The Dask dashboard draws its plots and tables on canvases with Bokeh: what they show is read from
the page's Bokeh documents (``Chromium.bokeh_sources``: the columns of each plot's data source).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# a headless browser that starts no traffic of its own (updates, sync, background fetches)
HEADLESS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FLAGS = [
    *HEADLESS,
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
    "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
    # resolve no host name but loopback ones: the page cannot reach (nor look up) anything off this
    # machine (Prefect's V2 UI starts an analytics client that fetches its config from the internet)
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


_BOKEH_SOURCES = """(() => {
  if (typeof Bokeh === "undefined") return [];
  const out = [];
  for (const doc of Bokeh.documents) {
    for (const m of doc._all_models.values()) {
      if (m.type !== "ColumnDataSource") continue;
      const cols = {};
      for (const [k, v] of Object.entries(m.data)) cols[k] = Array.from(v);
      out.push(cols);
    }
  }
  return out;
})()"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@dataclass
class PageReport:
    url: str
    text: str = ""
    api_errors: list[str] = field(default_factory=list)  # "<status> <method> <url>: <body head>"
    failed_requests: list[str] = field(default_factory=list)  # requests to the page's server that got no answer
    exceptions: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    # not counted as problems: static files the UI links but does not ship (favicon.ico, an icon), and
    # requests off this machine (blocked by FLAGS)
    missing_static: list[str] = field(default_factory=list)
    offsite: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return self.api_errors + self.failed_requests + self.exceptions + self.console_errors


class Chromium:
    """One headless browser with one page; a context manager."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self._ids = itertools.count(1)
        self._pending: list[dict[str, Any]] = []  # events received while waiting for a command's reply

    def __enter__(self) -> Chromium:
        from websockets.sync.client import connect

        self._profile = tempfile.TemporaryDirectory(prefix="dpdist-chromium-", ignore_cleanup_errors=True)
        self._log = open(Path(self._profile.name) / "chromium.log", "w")
        self.proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"chromium did not start: {(Path(self._profile.name) / 'chromium.log').read_text()}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.loads(r.read()) if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        self.ws.close()
        os.killpg(self.proc.pid, signal.SIGTERM)  # the browser and its renderer/zygote children
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
        self._profile.cleanup()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are queued."""
        cid = next(self._ids)
        self.ws.send(json.dumps({"id": cid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == cid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._pending.append(msg)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def bokeh_sources(self) -> list[dict[str, list[Any]]]:
        """The data of every Bokeh ``ColumnDataSource`` in the page (one dict of columns each; typed
        arrays as lists); none where the page has no Bokeh document."""
        return self.evaluate(_BOKEH_SOURCES) or []

    def visit(self, url: str, expect: list[str], timeout: float = 60, settle: float = 3.0) -> PageReport:
        """Open ``url``; wait until every string of ``expect`` is in the page's text, then ``settle``
        seconds more (late API calls); report what went wrong meanwhile."""
        self._pending = []
        report = PageReport(url)
        requests: dict[str, dict[str, Any]] = {}
        self.call("Page.navigate", url=url)
        deadline, found_at = time.time() + timeout, None
        next_poll = 0.0
        while True:
            now = time.time()
            if found_at is not None and now > found_at + settle or now > deadline:
                break
            if now >= next_poll:
                report.text = self.call(
                    "Runtime.evaluate", expression="document.body ? document.body.innerText : ''", returnByValue=True
                )["result"].get("value", "")
                if found_at is None and all(s in report.text for s in expect):
                    found_at = now
                next_poll = now + 0.5
            events, self._pending = self._pending, []
            try:
                events.append(json.loads(self.ws.recv(timeout=0.2)))
            except TimeoutError:
                pass
            for ev in events:
                self._record(ev, requests, report)
        return report

    def _record(self, ev: dict[str, Any], requests: dict[str, dict[str, Any]], report: PageReport) -> None:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Network.requestWillBeSent":
            requests[p["requestId"]] = p["request"]
        elif method == "Network.responseReceived":
            resp = p["response"]
            if resp["status"] >= 400 and "/api/" not in resp["url"]:
                report.missing_static.append(f"{resp['status']} {resp['url']}")
            elif resp["status"] >= 400:
                req = requests.get(p["requestId"], {})
                body = ""
                try:
                    body = self.call("Network.getResponseBody", requestId=p["requestId"]).get("body", "")
                except (RuntimeError, TimeoutError):
                    pass
                report.api_errors.append(
                    f"{resp['status']} {req.get('method', '?')} {resp['url']}: {body[:300]}"
                    f" (request body: {str(req.get('postData', ''))[:300]})"
                )
        elif method == "Network.loadingFailed":
            url = requests.get(p["requestId"], {}).get("url", "?")
            # a name that did not resolve is off-site whatever its URL (the loopback needs no DNS), also
            # when the request's start was not seen (its URL then unknown here)
            remote = urllib.parse.urlsplit(url).hostname not in (None, "127.0.0.1", "localhost", "::1")
            if remote or p.get("errorText") == "net::ERR_NAME_NOT_RESOLVED":
                report.offsite.append(f"{url}: {p.get('errorText')}")
            # a request the page itself abandoned (navigation, superseded poll) is not a failure
            elif not p.get("canceled"):
                report.failed_requests.append(f"failed {url}: {p.get('errorText')}")
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            report.exceptions.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            report.console_errors.append(
                "console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        # the browser's own "Failed to load resource" lines repeat the network events above
        elif (
            method == "Log.entryAdded" and p["entry"].get("level") == "error" and p["entry"].get("source") != "network"
        ):
            report.console_errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
