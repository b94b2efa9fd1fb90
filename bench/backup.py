#!/usr/bin/env python3
"""bench/: backup and restore of a large pb_data, ferrobase against PocketBase 0.40.6, side by side.

  bench/backup.py                 # a 1 GiB data.db (about 2 minutes to seed, then both servers)
  bench/backup.py --mib 64        # a smaller one (a smoke test)

The data dir is made once by the reference (superuser, a `blobs` collection through its API),
then filled through SQLite directly with rows of random words until data.db reaches the size asked
for (PocketBase opens it as its own afterwards). Each server then runs on its own copy, unpinned,
on 127.0.0.1:
  backup   POST /api/backups {"name": "bench.zip"}: both answer when the zip is complete
  restore  a marker record is created after the backup, then POST /api/backups/bench.zip/restore;
           the time runs until the server answers again without the marker (PocketBase waits one
           second before it starts and then re-executes its process; ferrobase swaps the data in
           its running process)
Results: a table on stdout and in results/backup-latest.md (and backup-<run id>.md).
"""
import argparse
import datetime
import json
import os
import random
import shutil
import sqlite3
import string
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import common  # noqa: E402

SU = ("bench@example.com", "benchpass123456")
ID_CHARS = string.ascii_lowercase + string.digits


def start(binary, data_dir, log):
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, "serve", "--http", f"127.0.0.1:{port}", "--dir", data_dir],
                            cwd=os.path.dirname(data_dir), stdout=log, stderr=subprocess.STDOUT)
    common.wait_healthy(base, proc, timeout=120)
    return proc, base


def seed(a, template):
    """A reference-made pb_data with a `blobs` collection, filled to `a.mib` MiB through SQLite."""
    data = os.path.join(template, "pb_data")
    subprocess.run([a.pb, "superuser", "upsert", SU[0], SU[1], "--dir", data], check=True,
                   stdout=subprocess.DEVNULL, cwd=template)
    with open(os.path.join(template, "seed.log"), "w") as log:
        proc, base = start(a.pb, data, log)
        try:
            tok = common.auth(base, "_superusers", *SU)
            st, raw = common.http("POST", base + "/api/collections", {
                "name": "blobs", "type": "base", "listRule": "", "viewRule": "",
                "fields": [{"name": "body", "type": "text"}]}, token=tok)
            assert st == 200, raw
        finally:
            common.stop(proc)
    shutil.rmtree(os.path.join(template, "pb_migrations"), ignore_errors=True)
    rng = random.Random(7)
    words = common.WORDS + ["".join(rng.choice(ID_CHARS) for _ in range(8)) for _ in range(4000)]
    db = sqlite3.connect(os.path.join(data, "data.db"))
    target = a.mib << 20
    n = 0
    while os.path.getsize(os.path.join(data, "data.db")) < target:
        rows = []
        for _ in range(2000):
            rid = "".join(rng.choice(ID_CHARS) for _ in range(15))
            rows.append((rid, " ".join(rng.choice(words) for _ in range(700))))
        db.executemany("INSERT INTO blobs (id, body) VALUES (?, ?)", rows)
        db.commit()
        n += len(rows)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return n


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def run(kind, binary, template, work):
    rundir = os.path.join(work, kind)
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    data = os.path.join(rundir, "pb_data")
    shutil.copytree(os.path.join(template, "pb_data"), data)
    out = {"kind": kind, "pb_data_bytes": du(data)}
    with open(os.path.join(rundir, "server.log"), "w") as log:
        proc, base = start(binary, data, log)
        try:
            tok = common.auth(base, "_superusers", *SU)
            t0 = time.time()
            st, raw = common.http("POST", base + "/api/backups", {"name": "bench.zip"}, token=tok, timeout=1800)
            out["backup_s"] = time.time() - t0
            assert st == 204, (st, raw[:300])
            out["zip_bytes"] = os.path.getsize(os.path.join(data, "backups", "bench.zip"))
            st, raw = common.http("POST", base + "/api/collections/blobs/records", {"body": "marker"}, token=tok)
            assert st == 200, raw
            marker = json.loads(raw)["id"]
            t0 = time.time()
            st, raw = common.http("POST", base + "/api/backups/bench.zip/restore", token=tok, timeout=1800)
            assert st == 204, (st, raw[:300])
            deadline = t0 + 1800
            while time.time() < deadline:
                st, _ = common.http("GET", base + f"/api/collections/blobs/records/{marker}", timeout=5)
                if st == 404:
                    break
                time.sleep(0.05)
            out["restore_s"] = time.time() - t0
            st, raw = common.http("GET", base + "/api/collections/blobs/records?perPage=1", timeout=120)
            assert st == 200, raw[:300]
            out["rows_after"] = json.loads(raw)["totalItems"]
        finally:
            common.stop(proc, grace=60)
    shutil.rmtree(rundir, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="size of data.db to seed (default 1024)")
    ap.add_argument("--ferrobase", default=os.path.join(HERE, "..", "target", "release", "ferrobase"))
    ap.add_argument("--pb", default=os.path.join(HERE, "..", ".venv-ref", "bin", "pocketbase"))
    ap.add_argument("--work", default=os.path.join(HERE, "work", "backup"))
    a = ap.parse_args()
    a.ferrobase, a.pb = os.path.abspath(a.ferrobase), os.path.abspath(a.pb)
    template = os.path.join(a.work, f"template-{a.mib}")
    if not os.path.exists(os.path.join(template, "done")):
        shutil.rmtree(template, ignore_errors=True)
        os.makedirs(template)
        t0 = time.time()
        n = seed(a, template)
        open(os.path.join(template, "done"), "w").write(str(n))
        print(f"seeded {n} rows in {time.time() - t0:.0f} s", flush=True)
    rows = int(open(os.path.join(template, "done")).read())
    results = [run(k, b, template, a.work) for k, b in (("ferrobase", a.ferrobase), ("pocketbase", a.pb))]
    for r in results:
        assert r["rows_after"] == rows, r
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    fb, pb = results

    def mib(b):
        return f"{b / (1 << 20):,.0f} MiB"

    lines = [
        f"# backup and restore: ferrobase vs PocketBase 0.40.6 ({mib(fb['pb_data_bytes'])} pb_data, {rows:,} rows)",
        "",
        f"run {run_id}; both unpinned on this machine ({os.cpu_count()} cpus); command: `bench/backup.py --mib {a.mib}`",
        "",
        "| | ferrobase | PocketBase |",
        "|---|---:|---:|",
        f"| backup (POST /api/backups until 204) | {fb['backup_s']:.1f} s | {pb['backup_s']:.1f} s |",
        f"| zip size | {mib(fb['zip_bytes'])} | {mib(pb['zip_bytes'])} |",
        f"| restore (POST .../restore until the restored data is served) | {fb['restore_s']:.1f} s | {pb['restore_s']:.1f} s |",
        "",
        f"Load average at the end: {os.getloadavg()[0]:.2f}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    res = os.path.join(HERE, "results")
    for name in (f"backup-{run_id}.md", "backup-latest.md"):
        with open(os.path.join(res, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
