"""Serve the end-to-end flow as a scheduled deployment from this process (no work pool needed).

    python -m dpdist.flows.serve --name nightly --cron "0 2 * * *" [--config run.toml]

``flow.serve`` registers the deployment with the Prefect API (``$PREFECT_API_URL``) and runs
its scheduled and manually triggered runs here until interrupted. ``deploy/prefect.yaml``
holds the same deployments for a work pool and ``prefect worker``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from dpdist.flows.end_to_end import end_to_end


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m dpdist.flows.serve", description=__doc__.splitlines()[0])
    p.add_argument("--name", default="nightly", help="deployment name")
    p.add_argument("--cron", default="0 2 * * *", help="cron schedule (UTC); '' for no schedule")
    p.add_argument("--config", default=None, help="run config passed to every run (default: embedded defaults)")
    args = p.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")  # the client's telemetry and its notice, too
    params = {"config": args.config} if args.config else {}
    end_to_end.serve(name=args.name, cron=args.cron or None, parameters=params)


if __name__ == "__main__":
    main()
