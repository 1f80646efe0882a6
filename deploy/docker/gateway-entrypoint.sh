#!/bin/sh
# Points each frontier provider of the gateway config at the real API when its key is set, and
# at the frontier simulator ($SWITCHYARD_FRONTIER_SIM, e.g. http://frontier-sim:8901) when it is
# not, then runs the command. The gateway config reads the results as ${SWITCHYARD_OPENAI_BASE}
# and ${SWITCHYARD_ANTHROPIC_BASE}; an explicitly set base is kept.
set -eu

resolve() {  # resolve KEY_VAR BASE_VAR REAL_BASE SIM_SUFFIX
    key=$(printenv "$1" || true)
    base=$(printenv "$2" || true)
    if [ -n "$base" ]; then
        return
    fi
    if [ -z "$key" ] && [ -n "${SWITCHYARD_FRONTIER_SIM:-}" ]; then
        export "$2=${SWITCHYARD_FRONTIER_SIM%/}$4"
        export "$1=simulator"  # the simulator takes any key; litellm wants one
        echo "switchyard: no $1; $2 -> the frontier simulator" >&2
    else
        export "$2=$3"
    fi
}

resolve OPENAI_API_KEY SWITCHYARD_OPENAI_BASE https://api.openai.com/v1 /v1
resolve ANTHROPIC_API_KEY SWITCHYARD_ANTHROPIC_BASE https://api.anthropic.com ""
exec "$@"
