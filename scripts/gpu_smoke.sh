#!/usr/bin/env bash
# The GPU smoke check (issue 46): the FSDP2, ZeRO-3 and LoRA training paths for one step each,
# the sharded reference model checked on every rank, agent learnability on a larger preset, and
# with --vllm the requires_gpu tests; within a budget (8 min by default), ending with one JSON
# line. The stages and their checks: scripts/gpu_smoke.py. How and where to run it:
# docs/deploy.md ("The GPU smoke check").
#
#   scripts/gpu_smoke.sh [--python PY] [--wheels DIR] [--dry-run] [gpu_smoke.py options...]
#
#   --python PY   the interpreter with torch, transformers, accelerate and peft
#                 (default: $PYTHON, else .venv-gpu/bin/python when present, else python3)
#   --wheels DIR  wheels carried to a machine that fetches nothing (trl, datasets...): installed
#                 offline, without dependencies, into <out>/site, which goes first on PYTHONPATH
#   --dry-run     run nothing; print the plan as the JSON line
#   --help        gpu_smoke.py's options (budget, out, gpus, learnability, vllm)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$repo/.venv-gpu/bin/python" ]]; then python="$repo/.venv-gpu/bin/python"; else python=python3; fi
fi
wheels=""
out="$repo/.cache/gpu-smoke"
dry_run=0
args=()
while (($#)); do
    case "$1" in
        --python) python="${2:?--python needs a path}"; shift 2 ;;
        --wheels) wheels="${2:?--wheels needs a directory}"; shift 2 ;;
        --out) out="${2:?--out needs a directory}"; args+=("$1" "$2"); shift 2 ;;
        --dry-run) dry_run=1; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done

site="$out/site"
if [[ -n "$wheels" ]]; then
    shopt -s nullglob
    found=("$wheels"/*.whl)
    shopt -u nullglob
    if ((${#found[@]} == 0)); then
        echo "gpu_smoke: no wheels in $wheels" >&2
        exit 2
    fi
    install=("$python" -m pip install --quiet --no-index --no-deps --target "$site" "${found[@]}")
    if ((dry_run)); then
        echo "gpu_smoke: would run: ${install[*]}" >&2
    else
        mkdir -p "$site"
        "${install[@]}" >&2
    fi
fi

export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"
exec "$python" "$repo/scripts/gpu_smoke.py" ${args[@]+"${args[@]}"}
