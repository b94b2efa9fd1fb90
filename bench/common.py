"""Shared helpers for bench/ (stdlib only; every URL is on 127.0.0.1)."""
import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

# The vocabulary of titles and bodies; lua/filter_sort.lua draws its `title ~ 'word'` values from it.
WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud "
    "exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure "
    "in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint "
    "occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est"
).split()


def http(method, url, body=None, token=None, timeout=60):
    """One request; returns (status, body bytes). Status 0 = no HTTP answer (connection error, timeout)."""
    assert url.startswith("http://127.0.0.1:"), url
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e).encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base, proc, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited during start (rc={proc.returncode})")
        st, _ = http("GET", base + "/api/health", timeout=2)
        if st == 200:
            return time.time() - t0
        time.sleep(0.1)
    raise RuntimeError(f"server not healthy after {timeout}s")


def auth(base, collection, identity, password):
    st, raw = http("POST", base + f"/api/collections/{collection}/auth-with-password",
                   {"identity": identity, "password": password})
    if st != 200:
        raise RuntimeError(f"auth {collection}/{identity}: HTTP {st} {raw[:300]!r}")
    return json.loads(raw)["token"]


def stop(proc, grace=15):
    """SIGTERM, then SIGKILL after `grace` seconds. Only ever the process we started."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
