"""Files under load, ferrobase against the reference PocketBase 0.40.6, side by side in one run.

Scenarios (each server on a fresh data dir, pinned to --server-cpus; wrk on --wrk-cpus):
  upload_1m     POST multipart creates, each with one 1 MiB file          (wrk, lua/upload.lua)
  download_1m   GET of one stored 1 MiB file                              (wrk, lua/get.lua)
  download_16k  GET of one stored 16 KiB file (an avatar's size)          (wrk, lua/get.lua)
  thumb_cached  GET ?thumb=100x100 of a 640x480 PNG, the thumb made once  (wrk, lua/get.lua)
  rss_20x20     20 clients upload 20 MiB each at once: the server's peak RSS (sampled every 20 ms),
                on a server process of its own
  floor         no real server: bench/files_floor.c (built with gcc) answers every GET with the
                same file, read and written (`rw`) or sent with sendfile(2), pinned like the
                servers, under the same wrk runs as download_1m and download_16k: the most
                this machine gives a server of either kind. Run once per rep, shown under the table

Every run's data dir is kept until the bench ends (uploads leave about 2 GB per server and rep on
disk meanwhile), so no run pays for deleting the one before it (see clear_work).

Run through bench/files.sh (it builds ferrobase; the reference and wrk come from bench/run.sh).
Stdlib only; every URL is on 127.0.0.1; every load run is bounded by --duration.
"""
import argparse
import datetime
import http.client
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

SU = ("bench@example.com", "bench-pass-123")
MIB = 1 << 20
SCENARIOS = ("upload_1m", "download_1m", "download_16k", "thumb_cached", "rss_20x20", "floor")


def png(width, height):
    """An RGB gradient PNG (filter 0 rows, zlib level 6), built with the stdlib."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width):
            rows += bytes(((x * 255) // width, (y * 255) // height, ((x + y) * 7) & 255))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b"")


def multipart(field, name, data, boundary="----ferrobase-bench-files"):
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post_raw(base, path, body, ctype, token):
    host, port = base[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request("POST", path, body=body, headers={"Content-Type": ctype, "Authorization": token})
    r = c.getresponse()
    out = (r.status, r.read())
    c.close()
    return out


def rss_kb(pid, key="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    def __init__(self, kind, a, label):
        self.kind = kind
        # Each run's data stays until the whole bench ends (see clear_work).
        self.dir = os.path.join(a.work, "runs", f"{kind}-{label}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        binary = {"ferrobase": a.ferrobase, "baseline": a.baseline}.get(kind, a.pb)
        data = os.path.join(self.dir, "pb_data")
        subprocess.run([binary, "superuser", "upsert", *SU, "--dir", data], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = common.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [binary, "serve", "--http", f"127.0.0.1:{self.port}", "--dir", data]
        if a.server_cpus:
            cmd = ["taskset", "-c", a.server_cpus] + cmd
        env = dict(os.environ)
        env.pop("FERROBASE_CONFIG", None)
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        common.wait_healthy(self.base, self.proc)
        self.token = common.auth(self.base, "_superusers", *SU)

    def stop(self):
        common.stop(self.proc)
        self.log.close()


def clear_work(a, settle):
    """Remove the data every run left. With `settle`, wait out the time a file system may spend
    on recently deleted inodes: ext4 without a journal (this project's VM) scans past each inode
    freed in the last ~35 s (dirty_expire + 5 s) when it picks one for a new file, and right after
    thousands were freed that cost a third of an upload's CPU. Deleting each run's data just
    before the next server started put that cost into the next run's numbers. The time of the
    last removal is kept, so a bench started right after another waits too."""
    runs = os.path.join(a.work, "runs")
    stamp = os.path.join(a.work, "cleared-at")
    if os.path.isdir(runs) and os.listdir(runs):
        shutil.rmtree(runs, ignore_errors=True)
        os.sync()
        os.makedirs(a.work, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(str(time.time()))
    if not settle:
        return
    try:
        with open(stamp) as f:
            cleared = float(f.read())
    except (OSError, ValueError):
        return
    expire = 30
    try:
        with open("/proc/sys/vm/dirty_expire_centisecs") as f:
            expire = int(f.read()) // 100
    except (OSError, ValueError):
        pass
    left = cleared + expire + 6 - time.time()
    if left > 0:
        print(f"[files] earlier runs' data was removed {time.time() - cleared:.0f} s ago; "
              f"waiting {left:.0f} s for the file system to settle", file=sys.stderr)
        time.sleep(left)


def setup(s):
    """A public collection with one file field (32 MiB, thumbs 100x100); a 1 MiB file, a 16 KiB one and a PNG."""
    st, raw = common.http("POST", s.base + "/api/collections", {
        "name": "media", "listRule": "", "viewRule": "", "createRule": "",
        "fields": [{"name": "f", "type": "file", "maxSelect": 1, "maxSize": 32 * MIB, "thumbs": ["100x100"]}],
    }, token=s.token)
    assert st == 200, raw
    out = {}
    for key, name, data in (("blob", "blob.bin", os.urandom(MIB)), ("small", "avatar.bin", os.urandom(16 << 10)),
                            ("image", "image.png", png(640, 480))):
        body, ctype = multipart("f", name, data)
        st, raw = post_raw(s.base, "/api/collections/media/records", body, ctype, s.token)
        assert st == 200, raw
        rec = json.loads(raw)
        out[key] = (f"/api/files/media/{rec['id']}/{rec['f']}", data)
    for key in ("blob", "small"):
        path, data = out[key]
        st, got = common.http("GET", s.base + path)
        assert st == 200 and got == data, f"download check failed: {st}"
    st, thumb = common.http("GET", s.base + out["image"][0] + "?thumb=100x100")
    assert st == 200, st
    out["thumb_bytes"] = len(thumb)
    return out


def cpu_ticks(pid):
    """The process's CPU time so far (utime + stime), in clock ticks."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wrk(a, script, url, conns, env=None, pid=None):
    """One wrk run; with `pid`, also the server's CPU time per completed request."""
    ticks = cpu_ticks(pid) if pid else None
    j = wrk_run(a, script, url, conns, env)
    if pid and j.get("requests"):
        j["cpu_ms_per_req"] = (cpu_ticks(pid) - ticks) * 1000 / os.sysconf("SC_CLK_TCK") / j["requests"]
    return j


def wrk_run(a, script, url, conns, env=None):
    cmd = ["wrk", "-t2", f"-c{conns}", f"-d{a.duration}s", "--timeout=30s", "--latency",
           "-s", os.path.join(HERE, "lua", script), url]
    if a.wrk_cpus:
        cmd = ["taskset", "-c", a.wrk_cpus] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.duration + 90,
                       env={**os.environ, "BENCH_LUA_DIR": os.path.join(HERE, "lua"), **(env or {})})
    for line in r.stdout.splitlines():
        if line.startswith("WRKJSON "):  # printed by lua/common.lua's done()
            j = json.loads(line[8:])
            j["rps"] = j["requests"] / j["duration_s"]
            j["non2xx"] = j["err_status"]
            j["socket_errors"] = j["err_connect"] + j["err_read"] + j["err_write"] + j["err_timeout"]
            return j
    raise RuntimeError(f"wrk rc={r.returncode}: {(r.stderr or r.stdout)[-300:]}")


def rss_20x20(s):
    """20 clients stream 20 MiB each at once; the server's RSS sampled all along."""
    size, clients = 20 * MIB, 20
    boundary = "----ferrobase-bench-rss"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"big.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    block = os.urandom(64 << 10)
    host, port = s.base[len("http://"):].split(":")
    statuses, peak, done = [], [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(s.proc.pid))
            time.sleep(0.02)

    def client():
        c = http.client.HTTPConnection(host, int(port), timeout=300)
        c.putrequest("POST", "/api/collections/media/records")
        c.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
        c.putheader("Authorization", s.token)
        c.putheader("Content-Length", str(len(head) + size + len(tail)))
        c.endheaders()
        c.send(head)
        for _ in range(size // len(block)):
            c.send(block)
        c.send(tail)
        r = c.getresponse()
        r.read()
        statuses.append(r.status)
        c.close()

    before = rss_kb(s.proc.pid)
    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.time() - t0
    done.set()
    sampler.join()
    return {"rss_before_kb": before, "rss_peak_kb": peak[0], "secs": secs,
            "ok": sum(1 for x in statuses if x == 200), "clients": clients}


def run(a, kind, rep):
    row = {"server": kind}
    # The previous run's writes (400 MB in rss_20x20) are flushed first, not during this one.
    os.sync()
    s = Server(kind, a, f"rep{rep}")
    try:
        fx = setup(s)
        if "upload_1m" in a.only:
            row["upload_1m"] = wrk(a, "upload.lua", s.base + "/api/collections/media/records", a.upload_conns, pid=s.proc.pid)
        if "download_1m" in a.only:
            row["download_1m"] = wrk(a, "get.lua", s.base + fx["blob"][0], a.conns, pid=s.proc.pid)
        if "download_16k" in a.only:
            row["download_16k"] = wrk(a, "get.lua", s.base + fx["small"][0], a.conns, pid=s.proc.pid)
        if "thumb_cached" in a.only:
            row["thumb_cached"] = wrk(a, "get.lua", s.base + fx["image"][0] + "?thumb=100x100", a.conns, pid=s.proc.pid)
            row["thumb_bytes"] = fx["thumb_bytes"]
    finally:
        s.stop()
    if "rss_20x20" in a.only:
        # Last (its 400 MB of writes would slow the runs after it), on a server of its own
        # (what the throughput runs left in the heap is not counted).
        s = Server(kind, a, f"rep{rep}-rss")
        try:
            setup(s)
            row["rss_20x20"] = rss_20x20(s)
        finally:
            s.stop()
    return row


def run_floor(a):
    """The floor server in both ways, under download_1m's and download_16k's wrk runs."""
    os.makedirs(a.work, exist_ok=True)
    exe = os.path.join(a.work, "files_floor")
    build = subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(HERE, "files_floor.c")],
                           capture_output=True, text=True)
    if build.returncode != 0:
        raise RuntimeError(f"gcc files_floor.c: {build.stderr[-300:]}")
    row = {"server": "floor"}
    for size, scn in ((MIB, "download_1m"), (16 << 10, "download_16k")):
        path = os.path.join(a.work, f"floor-{size}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(size))
        for mode in ("rw", "sendfile"):
            port = common.free_port()
            cmd = [exe, path, str(port), mode]
            if a.server_cpus:
                cmd = ["taskset", "-c", a.server_cpus] + cmd
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                common.wait_healthy(f"http://127.0.0.1:{port}", proc)
                row[f"{scn}_{mode}"] = wrk(a, "get.lua", f"http://127.0.0.1:{port}/file", a.conns, pid=proc.pid)
            finally:
                common.stop(proc)
    return row


def render(rows, a):
    by = {}
    for r in rows:
        by.setdefault(r["server"], []).append(r)

    def med(kind, scn, key):
        xs = sorted(r[scn][key] for r in by.get(kind, []) if scn in r)
        return xs[len(xs) // 2] if xs else None

    lines = [f"# files bench {a.run_id}", "",
             f"server cpus `{a.server_cpus}`, wrk cpus `{a.wrk_cpus}`, {a.reps} rep(s) x {a.duration} s, "
             f"uploads -c{a.upload_conns}, downloads -c{a.conns}", "",
             "| scenario | ferrobase | pocketbase | ratio |" + (f" {a.baseline_label} | ferrobase / it |" if a.baseline else ""),
             "|---|---|---|---|" + ("---|---|" if a.baseline else "")]
    for scn in ("upload_1m", "download_1m", "download_16k", "thumb_cached"):
        if scn not in a.only:
            continue
        fb, pb, bl = med("ferrobase", scn, "rps"), med("pocketbase", scn, "rps"), med("baseline", scn, "rps")
        def cell(v, k):
            if v is None:
                return "-"
            cpu = med(k, scn, "cpu_ms_per_req")
            return f"{v:,.0f} req/s (p99 {med(k, scn, 'lat_p99_ms'):.1f} ms" + (f", {cpu:.2f} ms CPU/req)" if cpu else ")")
        ratio = f"{fb / pb:.2f}x" if fb and pb else "-"
        line = f"| {scn} | {cell(fb, 'ferrobase')} | {cell(pb, 'pocketbase')} | {ratio} |"
        if a.baseline:
            line += f" {cell(bl, 'baseline')} | {f'{fb / bl:.2f}x' if fb and bl else '-'} |"
        lines.append(line)
    if "rss_20x20" in a.only:
        fb, pb = med("ferrobase", "rss_20x20", "rss_peak_kb"), med("pocketbase", "rss_20x20", "rss_peak_kb")
        cell = lambda v: "-" if v is None else f"{v / 1024:.1f} MB peak"
        line = f"| rss_20x20 (20 x 20 MiB uploads) | {cell(fb)} | {cell(pb)} | |"
        if a.baseline:
            line += f" {cell(med('baseline', 'rss_20x20', 'rss_peak_kb'))} | |"
        lines.append(line)
    if "floor" in a.only and by.get("floor"):
        lines += ["", "The machine's floor (`bench/files_floor.c`: every GET answered with the same file and "
                  "nothing else, pinned like the servers, the same wrk runs), median over reps:", "",
                  "| scenario | read and write (`rw`) | sendfile |", "|---|---|---|"]
        for scn in ("download_1m", "download_16k"):
            def fl(mode):
                v = med("floor", f"{scn}_{mode}", "rps")
                cpu = med("floor", f"{scn}_{mode}", "cpu_ms_per_req")
                return "-" if v is None else f"{v:,.0f} req/s ({cpu:.2f} ms CPU/req)"
            lines.append(f"| {scn} | {fl('rw')} | {fl('sendfile')} |")
    lines += ["", "Errors (non-2xx or socket) per run:", ""]
    for r in rows:
        errs = {k: (v.get("non2xx", 0), v.get("socket_errors", 0)) for k, v in r.items() if isinstance(v, dict) and "rps" in v}
        rss = r.get("rss_20x20")
        extra = f", rss_20x20 ok {rss['ok']}/{rss['clients']} in {rss['secs']:.1f} s" if rss else ""
        lines.append(f"- {r['server']}: {errs}{extra}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--servers", default="ferrobase,pocketbase")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--upload-conns", type=int, default=8)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--wrk-cpus", default="1")
    ap.add_argument("--baseline", default="", help="another ferrobase binary, run as server 'baseline' (add it to --servers)")
    ap.add_argument("--baseline-label", default="baseline")
    a = ap.parse_args()
    a.only = [x for x in a.only.split(",") if x]
    a.ferrobase = os.path.join(a.root, "target", "release", "ferrobase")
    a.pb = os.path.join(a.root, ".venv-ref", "bin", "pocketbase")
    a.work = os.path.join(HERE, "work", "files")
    a.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    rows = []
    clear_work(a, settle=True)
    for rep in range(a.reps):
        for kind in a.servers.split(","):  # alternating, so drift hits both
            print(f"[files] rep {rep + 1}/{a.reps} {kind}", file=sys.stderr)
            rows.append(run(a, kind, rep + 1))
        if "floor" in a.only:
            print(f"[files] rep {rep + 1}/{a.reps} floor", file=sys.stderr)
            rows.append(run_floor(a))
    clear_work(a, settle=False)
    md = render(rows, a)
    print(md)
    out = os.path.join(HERE, "results", f"files-{a.run_id}.md")
    with open(out, "w") as f:
        f.write(md)
    with open(os.path.join(HERE, "results", "files.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps({"run": a.run_id, **r}) + "\n")
    print(f"[files] wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
