"""Stand-in for vLLM's OpenAI server in the signal tests (`python -m tests.serving.fake_vllm`,
vLLM's arguments): answers `/health` and `/v1/models` (listing `--served-model-name`) on
`--host`/`--port`, and starts a child that only sleeps, in its process group as vLLM's engine
core is. SIGTERM ends this process only, after a second (vLLM takes about that to shut down): the
child goes only if its group is signalled."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENGINE_CORE_MARK = "fake-engine-core"
SHUTDOWN_S = 1.0


def shut_down(signum: int, frame: object) -> None:
    time.sleep(SHUTDOWN_S)
    raise SystemExit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    args, _ = parser.parse_known_args()
    signal.signal(signal.SIGTERM, shut_down)
    subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(3600)  # {ENGINE_CORE_MARK}"])
    models = json.dumps({"data": [{"id": args.served_model_name}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {"/health": b"", "/v1/models": models}.get(self.path)
            self.send_response(404 if body is None else 200)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
