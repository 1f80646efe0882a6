# The Switchyard gateway image: the `switchyard` CLI (gateway, traffic export, keys, fleet) and
# the frontier simulator (`python -m loadtests.frontier_sim`), which compose runs when no
# provider keys are set. Build from the repository root:
#   docker build -f deploy/docker/gateway.Dockerfile -t switchyard-gateway .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# PyTorch's CPU wheels: the package needs torch (model code shares it), the gateway never runs it
# on a GPU, and PyPI's default Linux wheel is a CUDA build of several GB.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
# torch first, the CPU build, at the version pyproject.toml pins (as `make setup` does), so the
# project install below finds it satisfied and pulls no CUDA build.
RUN pip install --index-url "${TORCH_INDEX_URL}" "$(python -c 'import tomllib; \
print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] \
if d.startswith("torch==")))')"
COPY gateway ./gateway
COPY router ./router
COPY traffic ./traffic
COPY serving ./serving
COPY rl_loop ./rl_loop
COPY loadtests ./loadtests
RUN pip install . && python -c "import torch; assert not torch.version.cuda, torch.version.cuda"

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --home-dir /var/lib/switchyard --create-home switchyard
COPY --from=build /opt/venv /opt/venv
COPY deploy/docker/gateway-entrypoint.sh /usr/local/bin/switchyard-entrypoint
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True
USER switchyard
WORKDIR /var/lib/switchyard
EXPOSE 8080
# One process per container: replicas scale by container (compose services, Kubernetes pods),
# and each exposes its own /metrics.
ENTRYPOINT ["/usr/local/bin/switchyard-entrypoint"]
CMD ["switchyard", "serve", "--config", "/etc/switchyard/gateway.yaml", \
     "--host", "0.0.0.0", "--port", "8080", "--workers", "1"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/ready', timeout=2)"]
