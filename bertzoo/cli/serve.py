"""`bertzoo serve MODEL [--host H] [--port P]`: answer /predict, /embed and /generate over HTTP."""

from __future__ import annotations

import argparse

from bertzoo.cli.common import int_range, non_negative_float, positive_float, positive_int


def add_parser(sub) -> None:
    sv = sub.add_parser("serve", help="serve a model over HTTP: /predict, /embed, /generate (FastAPI + uvicorn)")
    sv.add_argument("model", help="model directory (fine-tuned, encoder, GPT), builtin:NAME or hf:ID")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int_range(1, 65535), default=8000, help="port to listen on")
    sv.add_argument("--batch-size", type=positive_int, default=32, help="inputs per model call (dynamic batching)")
    sv.add_argument(
        "--max-wait-ms",
        type=non_negative_float,
        default=2.0,
        help="how long a group may wait for the requests the recent load says are coming (a lone client's never "
        "waits; 0: no wait, those arriving while the model runs join the next group)",
    )
    sv.add_argument("--max-texts", type=positive_int, default=256, help="inputs per request (more: 413)")
    sv.add_argument("--max-body-bytes", type=positive_int, default=1_000_000, help="request body limit (more: 413)")
    sv.add_argument("--max-length", type=int_range(3), default=128, help="/embed: tokens per text")
    sv.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    sv.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="/predict and /embed: auto = bf16 where the device runs it natively",
    )
    sv.add_argument("--int8", action="store_true", help="int8 linear layers (dynamic quantization; CPU only)")
    sv.add_argument(
        "--drain-seconds", type=positive_float, default=30.0, help="on SIGTERM, how long requests in flight may finish"
    )
    sv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bertzoo.errors import ConfigError

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError("bertzoo serve needs FastAPI and uvicorn: pip install 'bertzoo[serve]'") from None
    from bertzoo.serve.app import ServeSettings
    from bertzoo.serve.server import serve

    settings = ServeSettings(
        max_batch=args.batch_size,
        max_wait_ms=args.max_wait_ms,
        max_texts=args.max_texts,
        max_body_bytes=args.max_body_bytes,
    )
    return serve(
        args.model,
        host=args.host,
        port=args.port,
        settings=settings,
        device=args.device,
        int8=args.int8,
        max_length=args.max_length,
        precision=args.precision,
        drain_seconds=args.drain_seconds,
    )
