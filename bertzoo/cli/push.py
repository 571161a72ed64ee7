"""`bertzoo push MODEL hf:ORG/NAME`: a model directory to the Hugging Face Hub, with its model card."""

from __future__ import annotations

import argparse

from bertzoo.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("push", help="upload a model directory to the Hugging Face Hub, with its model card")
    p.add_argument("model", help="model directory: a run's final/ or model/, or a bertzoo convert output")
    p.add_argument("dest", help="the Hub repository, hf:ORG/NAME (created if missing)")
    p.add_argument("--private", action="store_true", help="create the repository private (an existing one keeps its)")
    p.add_argument("--revision", default=None, help="branch to push to (created if missing; default main)")
    p.add_argument("--message", default=None, help="commit message")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.hub import HUB_PREFIX, push

    # The prefix is required here as everywhere a model is named: a bare ORG/NAME reads as a local path.
    if not args.dest.startswith(HUB_PREFIX):
        raise ConfigError(f"destination {args.dest!r} is not a Hub repository; write hf:ORG/NAME (hf:my-org/bert-mini)")
    url = push(args.model, args.dest, private=args.private, revision=args.revision, message=args.message)
    print(f"pushed {args.model} -> {url}" + (f" (branch {args.revision})" if args.revision else ""))
    return 0
