"""Starts and stops a real `kvmem serve` for the integration tests (tests/server/test_*.py).

The binary comes from $KVMEM_BIN (set by ctest), the model is the installed default
(SmolLM2-135M-Instruct Q4_1, scripts/setup.sh). Each server gets an ephemeral port (--port 0,
read back from its start-up line) and the store directory the test chooses.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.environ.get("KVMEM_BIN", os.path.join(os.path.dirname(__file__), "../../build/apps/kvmem"))
MODEL = os.path.join(os.environ.get("KVMEM_HOME", os.path.expanduser("~/.cache/kvmem")),
                     "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# The tests' bounds on wall time are multiplied by this: a sanitizer build of the server runs
# several times slower (scripts/tsan.sh sets 5).
TIME_SCALE = float(os.environ.get("KVMEM_TIME_SCALE", "1"))


def skip_without_model():
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} missing (run scripts/setup.sh)")
        sys.exit(0)


class Server:
    """A kvmem serve process. `extra` adds command-line flags."""

    def __init__(self, store, extra=(), threads=2, ctx=4096, model=None, env=None):
        self.store = store
        self.log = tempfile.NamedTemporaryFile(prefix="kvmem-serve-", suffix=".log", delete=False)
        cmd = [BIN, "serve", "-m", model or MODEL, "--port", "0", "--store", store, "-t", str(threads),
               "-c", str(ctx), *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log,
                                     env={**os.environ, **(env or {})})
        self.port = None
        deadline = time.time() + 60 * TIME_SCALE
        while time.time() < deadline:
            with open(self.log.name, errors="replace") as f:
                text = f.read()
            m = re.search(r"on http://[^:]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvmem serve exited {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        if self.port is None:
            self.kill()
            raise RuntimeError("kvmem serve did not start:\n" + self.stderr())

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stderr(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30 * TIME_SCALE) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def request(self, method, path, body=None, headers=None, with_headers=False):
        """(status, body text), and the response headers too when with_headers."""
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60 * TIME_SCALE) as r:
                out = r.status, r.read().decode(), r.headers
        except urllib.error.HTTPError as e:
            out = e.code, e.read().decode(), e.headers
        return out if with_headers else out[:2]

    def post_json(self, path, obj, headers=None):
        """POST a JSON body; (status, parsed reply)."""
        status, text = self.request("POST", path, json.dumps(obj),
                                    {"Content-Type": "application/json", **(headers or {})})
        return status, json.loads(text) if text else None

    def kill(self):
        """SIGKILL: no clean-up runs, as in a crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
