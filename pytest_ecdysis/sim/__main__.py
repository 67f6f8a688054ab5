"""`python -m pytest_ecdysis.sim --port N --profile P [--latency S] [--nonce X]`: run the simulated model standalone.

Prints the base URL (`http://127.0.0.1:N`, the openai client's base_url is that plus `/v1`) and serves
until interrupted. A port in use or an unknown profile exits with status 2 and one clear message.
"""

from __future__ import annotations

import argparse
import os
import sys

from pytest_ecdysis.core.errors import UsageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_ecdysis.sim",
        description="Serve the simulated OpenAI-compatible model on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=8787, help="TCP port (0 = a free one; default 8787)")
    parser.add_argument(
        "--profile", default="default", help="profile for the bare model name 'sim' (default: default)"
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="fixed delay in seconds per completion (default 0)"
    )
    parser.add_argument(
        "--nonce",
        default=None,
        help="run nonce of the noisy draws (default: env ECDYSIS_SIM_NONCE, "
        "else each run id; fix it for identical reruns)",
    )
    args = parser.parse_args(argv)
    from pytest_ecdysis.sim.model import SimModel
    from pytest_ecdysis.sim.server import SimServerHandle, make_server

    try:
        if args.latency < 0:
            raise UsageError("--latency must be >= 0 seconds")
        model = SimModel(default_profile=args.profile, latency_s=args.latency, nonce=args.nonce)
        httpd = make_server(model, args.port, token=os.environ.get("ECDYSIS_SIM_TOKEN"))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    handle = SimServerHandle(httpd, None, model)
    print(
        f"ecdysis: simulated model (not a real LLM), profile {model.default_profile!r}, serving at "
        f"{handle.url} (OpenAI base_url {handle.url}/v1); ground truth needs ECDYSIS_SIM_TOKEN="
        f"{handle.token if os.environ.get('ECDYSIS_SIM_TOKEN') is None else '<yours>'} (export it for pytest)",
        flush=True,
    )
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
