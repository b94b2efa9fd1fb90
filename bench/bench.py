#!/usr/bin/env python3
"""bench/: ferrobase against the reference PocketBase, side by side, on the same data.

Normally started through bench/run.sh (which builds and installs what is missing first):

  bench/run.sh                          # every scenario, 3 reps of 10 s (about 20-25 minutes)
  bench/run.sh --quick                  # every scenario, 1 rep of 3 s (a smoke test, a few minutes)
  bench/run.sh --only list_1k,view --reps 5 --duration 20
  bench/run.sh --with-1m                # also the 1,000,000-row scenarios (opt-in)
  bench/run.sh --only list_1k,view_1m --cores 1,2   # one core vs two, interleaved, with their table

For every scenario and repetition the servers run interleaved (ferrobase, PocketBase, ferrobase, ...),
each on a fresh copy of the same PocketBase-written data dir, pinned to one core, with wrk pinned to
the other. Both write their request log as PocketBase does by default (`--no-logs` switches it off);
list_1k also runs with the other setting, for the "logs on vs off" table. See bench/README.md for the
method and how to read the table.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, HERE)
import common  # noqa: E402
import seed  # noqa: E402

LIST = "/api/collections/posts/records"
PRIVATE = "/api/collections/private_posts/records"
DATASETS = {"1k": 1_000, "100k": 100_000, "1m": 1_000_000, "1m_idx": 1_000_000}
# The 1,000,000-post templates are derived from the 100k one by SQL (seed.scale); 1m_idx is 1m with
# an index on `created` declared in the posts collection by the reference (seed.with_indexes).
DERIVED = {"1m": "100k", "1m_idx": "1m"}
INDEX_CREATED = ["CREATE INDEX `idx_posts_created` ON `posts` (`created`)"]
AUTH_USERS = 10  # list_auth_rule cycles through this many users' tokens
SIGN_IN = "/api/collections/users/auth-with-password"
FILTER_PROBE = ("views > 500 && title ~ 'lorem'", "-views")

# name -> (dataset, wrk script, path, description). Order = run order (writes last).
SCENARIOS = {
    "list_1k": ("1k", "get.lua", LIST, "default list (30/page, with total count)"),
    "ceiling": ("1k", "get.lua", LIST, "static server replaying list_1k's response bytes"),
    "list_1k_skiptotal": ("1k", "get.lua", LIST + "?skipTotal=1", "default list, skipTotal=1"),
    "view": ("1k", "view.lua", LIST + "/{id}", "one record by id (1,000 ids cycled)"),
    "filter_sort": ("1k", "filter_sort.lua", LIST + "?filter=(views > N && title ~ 'w')&sort=-views",
                    "filter + sort, values vary per request"),
    "list_auth_rule": ("1k", "auth_list.lua", PRIVATE,
                       f"listRule owner = @request.auth.id, {AUTH_USERS} users' tokens cycled"),
    "list_100k": ("100k", "get.lua", LIST, "default list (with total count), 100,000 records"),
    "list_100k_skiptotal": ("100k", "get.lua", LIST + "?skipTotal=1", "default list, skipTotal=1, 100,000 records"),
    "list_1m": ("1m", "get.lua", LIST, "default list (with total count), 1,000,000 records"),
    "sort_created_1m": ("1m", "get.lua", LIST + "?sort=-created", "the SDK's list: sort=-created, with total, no index"),
    "sort_created_1m_indexed": ("1m_idx", "get.lua", LIST + "?sort=-created",
                                "sort=-created, with total, an index on created declared in the collection"),
    "filter_sort_1m": ("1m", "filter_sort.lua", LIST + "?filter=(views > N && title ~ 'w')&sort=-views",
                       "filter + sort, values vary per request, 1,000,000 records"),
    "view_1m": ("1m", "view.lua", LIST + "/{id}", "one record by id (1,000 ids of the 1,000,000 cycled)"),
    "create": ("1k", "create.lua", LIST, "POST a small JSON post"),
    "batch_create": ("1k", "batch.lua", "/api/batch", "POST /api/batch with 50 small creates in one transaction"),
    "create_during_batches": ("1k", "create.lua", LIST,
                              "single creates while a second wrk (1 thread, 4 connections) sends 50-create batches"),
    "mixed_90_10": ("1k", "mixed.lua", LIST, "45% list, 45% view, 10% create"),
    "mixed_1m_w5": ("1m", "mixed_writes.lua", LIST, "5% create, the rest half sort=-created list, half view"),
    "mixed_1m_w20": ("1m", "mixed_writes.lua", LIST, "20% create, the rest half sort=-created list, half view"),
    "mixed_1m_w20_indexed": ("1m_idx", "mixed_writes.lua", LIST,
                             "mixed_1m_w20 with the index on created declared"),
    "mixed_1m_w20_filtered": ("1m", "mixed_writes.lua", LIST,
                              "mixed_1m_w20 whose list is a feed: filter=(published=true)&sort=-created"),
    "sign_in": ("1k", "sign_in.lua", SIGN_IN, "POST auth-with-password, the right password, 50 users cycled"),
    "list_during_wrong_sign_ins": ("1k", "get.lua", LIST,
                                   "default list while 50 connections send wrong passwords for the 50 users"),
}
# Scenario-specific load: batches are heavy requests, fewer connections keep both servers inside
# wrk's timeout; the background load runs beside the measured one for its whole life.
CONNS = {"batch_create": 16, "sign_in": 16,
         # a scan of 1,000,000 rows per request (0.3-1.5 s): at more connections no request of either
         # server would finish inside the request timeout, queued behind the others on one core
         "filter_sort_1m": 4}
# The 1,000,000-row scenarios are opt-in (--with-1m, or named in --only): the first run seeds their
# templates (a few minutes), and PocketBase needs up to seconds per request there.
LARGE = [s for s, v in SCENARIOS.items() if v[0] in DERIVED]
# A scenario's extra environment for its wrk script.
SCENARIO_ENV = {"mixed_1m_w5": {"BENCH_WRITE_PCT": "5"}, "mixed_1m_w20": {"BENCH_WRITE_PCT": "20"},
                "mixed_1m_w20_indexed": {"BENCH_WRITE_PCT": "20"},
                "mixed_1m_w20_filtered": {"BENCH_WRITE_PCT": "20",
                                          "BENCH_LIST_QUERY": "?filter=(published%3Dtrue)&sort=-created"}}
# Scenarios whose first requests on a fresh server are also timed uncached (the probe, then
# UNCACHED_EXTRA more with a no-op query parameter that keeps them out of any response cache).
UNCACHED = ("list_1m", "sort_created_1m", "sort_created_1m_indexed", "filter_sort_1m")
UNCACHED_EXTRA = 2
SORT_PROBE = "?sort=-created"
BACKGROUND = {"create_during_batches": ("batch.lua", 1, 4), "list_during_wrong_sign_ins": ("wrong_sign_in.lua", 1, 50)}
BATCH_SIZE = 50
SERVERS = ("ferrobase", "pocketbase", "baseline")
LABEL = {"ferrobase": "ferrobase", "pocketbase": "PocketBase", "ceiling": "ceiling", "baseline": "baseline"}
# PocketBase 0.40.6's default `logs` settings (a request row per request, kept 5 days). The seeded
# templates have the log off (maxDays 0); each run sets one of these through the settings API.
LOGS_ON = {"maxDays": 5, "minLevel": 0, "logIP": True, "logAuthId": False, "maxDataSize": 0}
LOGS_OFF = {"maxDays": 0}
# The scenario run a second time with the other request-log setting, for the on/off table.
LOGS_COMPARE = "list_1k"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- machine facts and /proc sampling

def machine_info():
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "mem_total_mb": mem_kb // 1024,
            "kernel": platform.release(), "arch": platform.machine(), "loadavg_at_start": os.getloadavg()[0]}


def git_info(root):
    def git(*args):
        r = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    # dirty = uncommitted changes to tracked files outside bench/ (what the binary is built from)
    dirty = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--", ".", ":(exclude)bench"]).returncode != 0
    return {"commit": commit, "dirty": dirty}


def proc_ticks(pid):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def proc_status_kb(pid, key):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def busy_ticks():
    """Busy clock ticks summed over all cores (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)


def settle(pid, limit):
    """Wait until `pid` uses < 5% of a core over 0.5 s (at most `limit` s). Returns the seconds waited."""
    return settle_ex(pid, limit)[0]


def settle_ex(pid, limit):
    """settle(), and whether the server did go idle (False: `limit` was reached while it was busy)."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.time()
    while time.time() - t0 < limit:
        a = proc_ticks(pid)
        time.sleep(0.5)
        b = proc_ticks(pid)
        if a is None or b is None or (b - a) / hz < 0.025:
            return round(time.time() - t0 - 0.5, 1), True
    return round(time.time() - t0 - 0.5, 1), False


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------- servers

class Server:
    """One server process on a fresh copy of a template, pinned with taskset."""

    def __init__(self, kind, a, template, logpath, request_log=None):
        """`request_log`: True or False sets the request log through the settings API once the
        server is up; None leaves the template's setting (off)."""
        self.kind = kind
        self.port = common.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        rundir = os.path.join(a.work, "run", kind)
        if os.path.exists(rundir):
            shutil.rmtree(rundir)
        os.makedirs(rundir)
        if kind == "ceiling":
            cmd = [a.ceiling, "--http", f"127.0.0.1:{self.port}", "--body", os.path.join(template, "resp_list.json")]
        else:
            shutil.copytree(os.path.join(template, "pb_data"), os.path.join(rundir, "pb_data"))
            binary = {"ferrobase": a.ferrobase, "baseline": a.baseline}.get(kind, a.pb)
            cmd = [binary, "serve", "--http", f"127.0.0.1:{self.port}", "--dir", "pb_data"]  # relative to cwd
        if a.server_cpus:
            cmd = ["taskset", "-c", a.server_cpus] + cmd
        env = dict(os.environ)
        env.pop("FERROBASE_CONFIG", None)
        # A pb.toml for one side only (e.g. [store] synchronous = "FULL" against the default).
        # (getattr: realtime.py, files.py and plugins.py share this class without these options)
        config = {"ferrobase": getattr(a, "ferrobase_config", None),
                  "baseline": getattr(a, "baseline_config", None)}.get(kind)
        if config:
            env["FERROBASE_CONFIG"] = config
        self.log = open(logpath, "w")
        # cwd = the run dir: no ./pb.toml, pb_public or pb_hooks from elsewhere is picked up
        self.proc = subprocess.Popen(cmd, cwd=rundir, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid  # taskset execs the server, so this is the server's pid
        try:
            self.start_s = common.wait_healthy(self.base, self.proc, timeout=a.start_timeout)
            if kind != "ceiling" and request_log is not None:
                self.set_request_log(request_log)
        except RuntimeError:
            self.stop()
            raise

    def set_request_log(self, on):
        """The request log as PocketBase has it by default (on), or off: through the settings API,
        as an operator would, so each server applies it its own way."""
        token = common.auth(self.base, "_superusers", seed.SUPERUSER_EMAIL, seed.SUPERUSER_PASSWORD)
        st, raw = common.http("PATCH", self.base + "/api/settings", {"logs": LOGS_ON if on else LOGS_OFF}, token)
        if st != 200:
            raise RuntimeError(f"request log {'on' if on else 'off'}: HTTP {st} {raw[:200]!r}")

    def stop(self):
        rc = common.stop(self.proc)
        self.log.close()
        return rc


# ---------------------------------------------------------------- probes (one checked request before load)

def probe(scn, srv, ctx):
    """One request with the scenario's shape; checks the answer is the right one, not just fast.
    Returns {"status", "bytes", "ok", "note"}."""
    ds = SCENARIOS[scn][0]
    base = srv.base
    tpl = ctx["templates"][ds]
    expect_total = DATASETS[ds]
    notes = []

    def get(path, token=None):
        return common.http("GET", base + path, token=token, timeout=ctx["a"].probe_timeout)

    def js(raw):
        try:
            return json.loads(raw)
        except ValueError:
            notes.append("body is not JSON")
            return {}

    if scn == "ceiling":
        st, raw = get(LIST)
        if len(raw) != tpl["resp_bytes"]:
            notes.append(f"{len(raw)} bytes, expected {tpl['resp_bytes']}")
    elif scn in ("list_1k", "list_100k", "list_1k_skiptotal", "list_100k_skiptotal", "mixed_90_10", "list_1m"):
        skip = "skiptotal" in scn
        st, raw = get(LIST + ("?skipTotal=1" if skip else ""))
        if st == 200:
            j = js(raw)
            want = -1 if skip else expect_total
            if j.get("totalItems") != want:
                notes.append(f"totalItems {j.get('totalItems')} != {want}")
            if len(j.get("items", [])) != 30:
                notes.append(f"{len(j.get('items', []))} items != 30")
    elif scn in ("sort_created_1m", "sort_created_1m_indexed") or scn.startswith("mixed_1m"):
        st, raw = get(LIST + SORT_PROBE)
        if st == 200:
            j = js(raw)
            items = j.get("items", [])
            if j.get("totalItems") != expect_total:
                notes.append(f"totalItems {j.get('totalItems')} != {expect_total}")
            want = ctx["sort_expect"][ds]
            got = [it.get("id") for it in items]
            if got != want:
                created = [str(it.get("created")) for it in items]
                notes.append(f"not the newest {len(want)} by created" + (
                    "" if created == sorted(created, reverse=True) else " (not sorted)"))
    elif scn in ("view", "view_1m"):
        rid = ctx["ids"][0]
        st, raw = get(f"{LIST}/{rid}")
        if st == 200 and js(raw).get("id") != rid:
            notes.append("wrong record")
    elif scn in ("filter_sort", "filter_sort_1m"):
        f, s = FILTER_PROBE
        st, raw = get(f"{LIST}?filter={urllib.parse.quote(f)}&sort={s}")
        if st == 200:
            j = js(raw)
            items = j.get("items", [])
            if j.get("totalItems") != ctx["filter_expect"][ds]:
                notes.append(f"totalItems {j.get('totalItems')} != {ctx['filter_expect'][ds]}")
            views = [it.get("views") for it in items]
            if views != sorted(views, reverse=True) or any(v is None or v <= 500 for v in views):
                notes.append("items not filtered/sorted")
            if any("lorem" not in str(it.get("title", "")).lower() for it in items):
                notes.append("title filter not applied")
    elif scn == "list_auth_rule":
        user = ctx["users"][0]
        st, raw = get(PRIVATE, token=ctx["tokens"][0])
        if st == 200:
            j = js(raw)
            if j.get("totalItems") != user["private_count"]:
                notes.append(f"totalItems {j.get('totalItems')} != {user['private_count']}")
            if any(it.get("owner") != user["id"] for it in j.get("items", [])):
                notes.append("rule not applied (foreign records listed)")
        st_anon, raw_anon = get(PRIVATE)
        if st_anon == 200 and js(raw_anon).get("totalItems") not in (0, -1):
            notes.append("anonymous request sees records")
    elif scn in ("create", "create_during_batches"):
        body = {"title": "probe", "body": "probe", "published": True, "views": 1, "owner": ctx["users"][0]["id"]}
        st, raw = common.http("POST", base + LIST, body, timeout=ctx["a"].probe_timeout)
        if st == 200 and not js(raw).get("id"):
            notes.append("no id in answer")
    elif scn == "sign_in":
        u = ctx["users"][0]
        st, raw = common.http("POST", base + SIGN_IN, {"identity": u["email"], "password": tpl["user_password"]},
                              timeout=ctx["a"].probe_timeout)
        if st == 200 and (not js(raw).get("token") or js(raw).get("record", {}).get("id") != u["id"]):
            notes.append("no token for the user")
    elif scn == "list_during_wrong_sign_ins":
        st, raw = get(LIST)
        if st == 200 and js(raw).get("totalItems") != expect_total:
            notes.append(f"totalItems {js(raw).get('totalItems')} != {expect_total}")
    elif scn == "batch_create":
        one = {"title": "probe", "body": "probe", "published": True, "views": 1, "owner": ctx["users"][0]["id"]}
        reqs = [{"method": "POST", "url": LIST, "body": one} for _ in range(2)]
        st, raw = common.http("POST", base + "/api/batch", {"requests": reqs}, timeout=ctx["a"].probe_timeout)
        if st == 200:
            out = js(raw)
            if not isinstance(out, list) or len(out) != 2 or any(o.get("status") != 200 for o in out):
                notes.append("not two created records")
    else:
        raise AssertionError(scn)
    if st == 0:
        notes.append(raw.decode(errors="replace")[:200])
    elif not 200 <= st < 300:
        notes.append(f"HTTP {st}: {raw[:200].decode(errors='replace')}")
    return {"status": st, "bytes": len(raw), "ok": 200 <= st < 300 and not notes, "note": "; ".join(notes)}


# ---------------------------------------------------------------- wrk

def wrk(a, script, base, path, secs, env, conns=None):
    cmd = ["wrk", f"-t{a.threads}", f"-c{conns or a.conns}", f"-d{secs}s", f"--timeout={a.req_timeout}s", "--latency",
           "-s", os.path.join(HERE, "lua", script), base + (path if script == "get.lua" else "/")]
    if a.wrk_cpus:
        cmd = ["taskset", "-c", a.wrk_cpus] + cmd
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=secs + 60)
    except subprocess.TimeoutExpired:
        return None, "wrk did not finish in time (killed)"
    for line in r.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:]), None
    return None, f"wrk rc={r.returncode}: {(r.stderr or r.stdout)[-300:]}"


def background(a, scn, base, env):
    """Start the scenario's background load (a second wrk on the load core) for the warm-up and
    the measured run; None when the scenario has none."""
    if scn not in BACKGROUND:
        return None
    script, threads, conns = BACKGROUND[scn]
    secs = a.attack_lead + a.warmup + a.settle_max + a.duration + 5
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{secs}s", f"--timeout={a.req_timeout}s",
           "-s", os.path.join(HERE, "lua", script), base + "/"]
    if a.wrk_cpus:
        cmd = ["taskset", "-c", a.wrk_cpus] + cmd
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def measure(a, script, base, path, proc, warm_env, run_env, row, conns=None, busy=False):
    """Warm up, wait until the server is idle, run the measured wrk and fill `row`: CPU shares,
    peak RSS, wrk's counts, req/s and a status (ok, errors, few, failed). Returns wrk's result.
    `busy`: a background load runs meanwhile, so the server is never idle and is not waited for."""
    if a.warmup > 0:
        wrk(a, script, base, path, a.warmup, warm_env, conns)
    # wrk's exit does not stop work the server already accepted: wait until it is idle, so the
    # warm-up's backlog is not measured (PocketBase keeps running queued queries for seconds)
    row["settle_s"], settled = (0, True) if busy else settle_ex(proc.pid, a.settle_max)
    if not settled:
        row["unsettled"] = True  # still busy with the warm-up's backlog when the measured run began
    t_srv0, t_busy0, t_kids0, t0 = proc_ticks(proc.pid), busy_ticks(), children_cpu(), time.time()
    res, err = wrk(a, script, base, path, a.duration, run_env, conns)
    t_srv1, t_busy1, t_kids1, t1 = proc_ticks(proc.pid), busy_ticks(), children_cpu(), time.time()
    row["peak_rss_kb"] = proc_status_kb(proc.pid, "VmHWM")
    row["rss_end_kb"] = proc_status_kb(proc.pid, "VmRSS")
    alive = proc.poll() is None
    if res is None:
        row.update(status="failed", error=err)
        return None
    hz = os.sysconf("SC_CLK_TCK")
    wall = max(t1 - t0, 1e-9)
    srv_cpu = (t_srv1 - t_srv0) / hz if t_srv0 is not None and t_srv1 is not None else None
    wrk_cpu = t_kids1 - t_kids0
    row["server_cpu_pct"] = round(100 * srv_cpu / wall, 1) if srv_cpu is not None else None
    row["wrk_cpu_pct"] = round(100 * wrk_cpu / wall, 1)
    row["other_cpu_pct"] = round(100 * ((t_busy1 - t_busy0) / hz - (srv_cpu or 0) - wrk_cpu) / wall, 1)
    row.update(res)
    errors = res["err_connect"] + res["err_read"] + res["err_write"] + res["err_timeout"] + res["err_status"]
    ok_requests = res["requests"] - res["err_status"]
    row["errors"] = errors
    row["rps_all"] = round(res["requests"] / res["duration_s"], 1)
    row["rps"] = round(ok_requests / res["duration_s"], 1)  # successful (non-error status) responses/s
    row["resp_bytes_avg"] = round(res["bytes"] / res["requests"]) if res["requests"] else None
    if not alive:
        row.update(status="failed", error=f"server exited during the run (rc={proc.returncode})")
    elif ok_requests <= 0:
        row.update(status="failed", error="no successful response" + (
            f" ({res['err_timeout']} timeouts > {a.req_timeout}s)" if res["err_timeout"] else ""))
    elif errors:
        row["status"] = "errors"
    elif ok_requests < (conns or a.conns):
        row["status"] = "few"  # fewer responses than connections: the queue never drained once
    else:
        row["status"] = "ok"
    if row.get("unsettled") and row["status"] != "failed":
        row["status"] += "+unsettled"
    return res


def run_args(a, scn, cores):
    """The options as this run uses them: the 1,000,000-row scenarios' own connections and request
    timeout; on two cores, the server and wrk both on cpus 0 and 1 (sharing them)."""
    ra = argparse.Namespace(**vars(a))
    if scn in LARGE:
        ra.conns, ra.req_timeout = a.conns_1m, a.req_timeout_1m
    if cores == 2 and (a.server_cpus or a.wrk_cpus):
        ra.server_cpus = ra.wrk_cpus = "0,1"
    return ra


def timed_uncached(scn, srv, ctx):
    """The milliseconds of UNCACHED_EXTRA more requests like the probe's, each with a different no-op
    query parameter (both servers ignore it; a response cache keyed on the query string misses)."""
    ds = SCENARIOS[scn][0]
    path = {"list_1m": LIST + "?", "filter_sort_1m": "{}?filter={}&sort={}&".format(
        LIST, urllib.parse.quote(FILTER_PROBE[0]), FILTER_PROBE[1])}.get(scn, LIST + SORT_PROBE + "&")
    out = []
    for k in range(UNCACHED_EXTRA):
        t0 = time.time()
        st, raw = common.http("GET", f"{srv.base}{path}bench_nocache={k}", timeout=ctx["a"].probe_timeout)
        ms = round(1000 * (time.time() - t0), 1)
        try:
            total = json.loads(raw).get("totalItems") if st == 200 else None
        except ValueError:
            total = None
        want = ctx["filter_expect"][ds] if "filter" in scn else DATASETS[ds]
        if total != want:
            return out, f"uncached request {k}: HTTP {st}, totalItems {total} != {want}"
        out.append(ms)
    return out, None


def run_one(a, scn, kind, rep, request_log, ctx, cores=1):
    ds, script, path, _ = SCENARIOS[scn]
    tpl = ctx["templates"][ds]
    a = run_args(a, scn, cores)
    row = {"ts": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "run_id": ctx["run_id"], "scenario": scn, "server": kind, "rep": rep, "dataset": ds,
           "records": DATASETS[ds], "request_log": request_log if kind != "ceiling" else None, **ctx["static"],
           "cores": cores, "conns": CONNS.get(scn, a.conns), "req_timeout_s": a.req_timeout,
           "server_cpus": a.server_cpus, "wrk_cpus": a.wrk_cpus}
    logpath = os.path.join(ctx["logdir"], f"{scn}-{kind}-{rep}-log{'on' if request_log else 'off'}-{cores}c.log")
    try:
        srv = Server(kind, a, tpl["dir"], logpath, request_log)
    except (RuntimeError, OSError) as e:
        row.update(status="failed", error=f"start: {e}")
        return row
    row["start_s"] = round(srv.start_s, 2)
    try:
        env = dict(os.environ, BENCH_LUA_DIR=os.path.join(HERE, "lua"), BENCH_IDS=tpl["ids_file"],
                   BENCH_OWNERS=tpl["owners_file"], BENCH_EMAILS=tpl["emails_file"],
                   BENCH_PASSWORD=tpl["user_password"])
        ctx["ids"] = tpl["ids"]
        ctx["users"] = tpl["users"]
        if scn == "list_auth_rule":
            try:
                ctx["tokens"] = [common.auth(srv.base, "users", u["email"], tpl["user_password"])
                                 for u in tpl["users"][:AUTH_USERS]]
            except RuntimeError as e:
                row.update(status="failed", error=f"auth: {e}")
                return row
            tok_file = os.path.join(a.work, "run", kind, "tokens.txt")
            open(tok_file, "w").write("".join(t + "\n" for t in ctx["tokens"]))
            env["BENCH_TOKENS"] = tok_file
        t0 = time.time()
        pr = probe(scn, srv, ctx)
        pr["ms"] = round(1000 * (time.time() - t0), 1)
        row["probe"] = pr
        if not 200 <= pr["status"] < 300:
            row.update(status="failed", error=f"probe: {pr['note']}")
            return row
        if scn in UNCACHED:
            more, err = timed_uncached(scn, srv, ctx)
            row["uncached_ms"] = [pr["ms"]] + more
            if err:
                row.update(status="failed", error=err)
                return row
        env.update(SCENARIO_ENV.get(scn, {}))

        bg = background(a, scn, srv.base, env)
        if bg is not None and scn == "list_during_wrong_sign_ins" and a.attack_lead > 0:
            time.sleep(a.attack_lead)
        try:
            # 1M: the warm-up draws another random sequence than the measured run (filter_sort_1m's
            # filters would otherwise be answered from a cache filled by the warm-up)
            warm_env = dict(env, BENCH_SEED_SALT="104729") if scn in LARGE else env
            measure(a, script, srv.base, path, srv.proc, warm_env, env, row, CONNS.get(scn), bg is not None)
        finally:
            if bg is not None:
                # SIGINT: wrk stops and still prints its summary (and our done() line); a kill
                # would lose both. Through taskset the pid is wrk's own (taskset execs it).
                bg.send_signal(signal.SIGINT)
                try:
                    out, _ = bg.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    bg.kill()
                    out, _ = bg.communicate()
                for line in out.splitlines():
                    if line.startswith("WRKJSON "):
                        row["background"] = json.loads(line[8:])
                    elif line.startswith("WRKSTATUS "):
                        row["background_statuses"] = json.loads(line[10:])
        if scn in ("batch_create",):
            row["records_per_s"] = round(row.get("rps", 0) * BATCH_SIZE, 1)
        if not pr["ok"]:
            row["status"] = row["status"] + "+probe_mismatch" if row["status"] != "failed" else "failed"
        return row
    finally:
        srv.stop()


# ---------------------------------------------------------------- table

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def num(x, nd=0):
    if x is None:
        return "–"
    return f"{x:,.{nd}f}"


def lat(x):
    if x is None:
        return "–"
    return f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def rps_cell(rows):
    good = [r for r in rows if r.get("status") != "failed"]
    if not good:
        why = rows[0].get("error", "failed") if rows else "not run"
        return f"FAILED ({why[:60]})" if rows else "–"
    xs = [r["rps"] for r in good]

    def n(x):  # the 1M scenarios' slow servers: a tenth of a request per second still tells
        return num(x, 1 if x < 10 else 0)

    cell = n(med(xs))
    if len(xs) > 1:
        cell += f" ({n(min(xs))}–{n(max(xs))})"
    if len(good) < len(rows):
        cell += f" [{len(rows) - len(good)}/{len(rows)} failed]"
    if any(r["status"] != "ok" for r in good):
        cell += " ⚠"
    return cell


def lat_cell(rows):
    good = [r for r in rows if r.get("status") != "failed"]
    if not good:
        return "–"
    return " / ".join(lat(med([r[k] for r in good])) for k in ("lat_p50_ms", "lat_p95_ms", "lat_p99_ms"))


def rss_cell(rows):
    xs = [r.get("peak_rss_kb") for r in rows if r.get("peak_rss_kb")]
    return num(max(xs) / 1024) if xs else "–"


def err_cell(rows):
    if not rows:
        return "–"
    errs = sum(r.get("errors", 0) for r in rows)
    failed = sum(1 for r in rows if r.get("status") == "failed")
    mism = sum(1 for r in rows if "probe_mismatch" in r.get("status", "") or
               (r.get("probe") and not r["probe"]["ok"]))
    out = num(errs)
    if failed:
        out += f", {failed} failed"
    if mism:
        out += ", probe ≠"
    return out


def ratio_value(fb, pb):
    """Median over reps of ferrobase/PocketBase req/s, taken per rep (same window); None if none."""
    pbr = {r["rep"]: r for r in pb if r.get("status") != "failed" and r.get("rps")}
    rs = [r["rps"] / pbr[r["rep"]]["rps"] for r in fb if r.get("status") != "failed" and r["rep"] in pbr]
    return med(rs)


def ratio(fb, pb):
    """ratio_value() for the table."""
    x = ratio_value(fb, pb)
    if x is not None:
        return f"**{x:.2f}×**" if x < 100 else f"**{x:,.0f}×**"
    if any(r.get("status") != "failed" for r in fb) and pb and all(r.get("status") == "failed" for r in pb):
        return "PocketBase failed"
    return "–"


def cpu_per_req(rs):
    """Median over reps of the server's CPU time per successful response, in µs."""
    per = [r["server_cpu_pct"] / 100 * 1e6 / r["rps"] for r in rs
           if r.get("status") != "failed" and r.get("rps") and r.get("server_cpu_pct") is not None]
    return f"{med(per):.1f}" if per else "–"


def render(rows, ctx, a):
    main_log = not a.no_logs
    all_rows = rows
    rows = [r for r in rows if r.get("cores", 1) == a.cores[0]]  # the headline's core setting
    by, other = {}, {}
    for r in rows:
        # the headline is the runs under the chosen request-log setting; the others feed the
        # logs on vs off table only
        into = other if r.get("request_log") is not None and r["request_log"] != main_log else by
        into.setdefault((r["scenario"], r["server"]), []).append(r)
    st = ctx["static"]
    md = [f"## ferrobase vs PocketBase — {ctx['run_id']}", "",
          f"commit `{(st['git']['commit'] or '?')[:12]}`{' (dirty)' if st['git']['dirty'] else ''}, "
          f"{st['pocketbase']}; {st['machine']['cpu_model']} ({st['machine']['cpus']} cpus); "
          + (f"server on cpu {a.server_cpus or 'any'}, wrk -t{a.threads} -c{a.conns} on cpu {a.wrk_cpus or 'any'}; "
           if a.cores[0] == 1 or not (a.server_cpus or a.wrk_cpus) else
           f"two cores: server and wrk -t{a.threads} -c{a.conns} both on cpus 0,1; ")
          + (f"1,000,000-row scenarios -c{a.conns_1m} --timeout {a.req_timeout_1m}s; "
             if any(s in LARGE for s in ctx["scenarios"]) else "")
          + f"{a.reps} rep(s) × {a.duration}s after {a.warmup}s warm-up; request log "
          f"{'off (--no-logs)' if a.no_logs else 'on for both servers (PocketBase default settings)'}.", "",
          "| scenario | records | ferrobase req/s | PocketBase req/s | ferrobase / PocketBase | "
          "ferrobase p50 / p95 / p99 ms | PocketBase p50 / p95 / p99 ms | peak RSS MB fb / pb | errors fb / pb |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for scn in ctx["scenarios"]:
        if scn == "ceiling":
            continue
        fb, pb = by.get((scn, "ferrobase"), []), by.get((scn, "pocketbase"), [])
        md.append("| " + " | ".join([
            scn, num(DATASETS[SCENARIOS[scn][0]]), rps_cell(fb), rps_cell(pb), ratio(fb, pb),
            lat_cell(fb), lat_cell(pb), f"{rss_cell(fb)} / {rss_cell(pb)}", f"{err_cell(fb)} / {err_cell(pb)}",
        ]) + " |")
    if any(k == "baseline" for (_, k) in by):
        md += ["", f"**Before / after** (`--baseline`: {a.baseline_label}, interleaved with the others in each rep):", "",
               "| scenario | ferrobase req/s | baseline req/s | ferrobase / baseline | ferrobase CPU µs/req | "
               "baseline CPU µs/req | p99 ms fb / baseline |", "|---|---:|---:|---:|---:|---:|---:|"]
        for scn in ctx["scenarios"]:
            fb, bl = by.get((scn, "ferrobase"), []), by.get((scn, "baseline"), [])
            if not bl:
                continue
            md.append("| " + " | ".join([
                scn, rps_cell(fb), rps_cell(bl), ratio(fb, bl).replace("PocketBase", "baseline"),
                cpu_per_req(fb), cpu_per_req(bl),
                f"{lat(med([r['lat_p99_ms'] for r in fb if r.get('lat_p99_ms')]))} / "
                f"{lat(med([r['lat_p99_ms'] for r in bl if r.get('lat_p99_ms')]))}",
            ]) + " |")
    if other:
        on, off = (by, other) if main_log else (other, by)
        md += ["", f"**{LOGS_COMPARE} with request logs on vs off** (the same scenario run under both "
               "settings, interleaved in each rep; CPU µs/req = the server's CPU time per successful response):", "",
               "| server | req/s logs on | req/s logs off | on / off | CPU µs/req on | CPU µs/req off |",
               "|---|---:|---:|---:|---:|---:|"]
        for kind in SERVERS:
            ron, roff = on.get((LOGS_COMPARE, kind), []), off.get((LOGS_COMPARE, kind), [])
            if not ron and not roff:
                continue
            md.append("| " + " | ".join([
                LABEL[kind], rps_cell(ron), rps_cell(roff),
                ratio(ron, roff).replace("PocketBase failed", "off failed"), cpu_per_req(ron), cpu_per_req(roff),
            ]) + " |")
    ce = by.get(("ceiling", "ceiling"), [])
    if ce:
        good = [r for r in ce if r.get("status") != "failed"]
        md.append("")
        line = (f"**HTTP ceiling** (static server, the same {num(ctx['templates']['1k']['resp_bytes'])}-byte "
                f"list_1k response): {rps_cell(ce)} req/s, p50 / p95 / p99 {lat_cell(ce)} ms, peak RSS {rss_cell(ce)} MB.")
        cmed = med([r["rps"] for r in good])
        for kind in SERVERS:
            l1 = [r["rps"] for r in by.get(("list_1k", kind), []) if r.get("status") != "failed"]
            if cmed and l1:
                line += f" list_1k {LABEL[kind]} = **{100 * med(l1) / cmed:.0f}%** of the ceiling."
        md.append(line)
    for scn in ("batch_create", "create_during_batches"):
        if scn not in ctx["scenarios"]:
            continue
        parts = []
        for kind in SERVERS:
            rs = [r for r in by.get((scn, kind), []) if r.get("status") != "failed"]
            if not rs:
                continue
            if scn == "batch_create":
                parts.append(f"{LABEL[kind]} {num(med([r['records_per_s'] for r in rs]))} records/s")
            else:
                bg = [r["background"]["requests"] / r["background"]["duration_s"] for r in rs if r.get("background")]
                parts.append(f"{LABEL[kind]} single-create p99 {lat(med([r['lat_p99_ms'] for r in rs]))} ms "
                             f"beside {num(med(bg), 1) if bg else '–'} background batches/s (whole background run)")
        if parts:
            label = ("**batch_create** (50 creates per request, "
                     f"-c{CONNS['batch_create']})" if scn == "batch_create" else "**create_during_batches**")
            md += ["", f"{label}: " + "; ".join(parts) + "."]
    if "list_during_wrong_sign_ins" in ctx["scenarios"]:
        parts = []
        for kind in SERVERS:
            rs = [r for r in by.get(("list_during_wrong_sign_ins", kind), []) if r.get("status") != "failed"]
            if not rs:
                continue
            p99 = med([r["lat_p99_ms"] for r in rs if r.get("lat_p99_ms")])
            idle = med([r["lat_p99_ms"] for r in by.get(("list_1k", kind), [])
                        if r.get("status") != "failed" and r.get("lat_p99_ms")])
            part = f"{LABEL[kind]} list p99 {lat(p99)} ms"
            if idle and p99:
                part += f" ({p99 / idle:.2f}× its idle list_1k p99 of {lat(idle)} ms)"
            sts = [r["background_statuses"] for r in rs if r.get("background_statuses")]
            if sts:
                total = sum(sum(x.values()) for x in sts)
                part += (f", attackers answered {num(sum(x['s429'] for x in sts))} × 429, "
                         f"{num(sum(x['s400'] for x in sts))} × 400, {num(sum(x['other'] for x in sts))} other "
                         f"of {num(total)} (all reps, warm-up included)")
            parts.append(part)
        if parts:
            md += ["", "**list_during_wrong_sign_ins** (50 connections of wrong passwords beside the list, "
                   f"measured from {a.attack_lead + a.warmup} s into the attack): "
                   + "; ".join(parts) + "."]
    unc = [s for s in ctx["scenarios"] if s in UNCACHED]
    if unc:
        md += ["", "**Uncached, one request at a time** (on each fresh server: the probe, then "
               f"{UNCACHED_EXTRA} more with a no-op query parameter that no response cache holds; median ms, "
               "min–max over every such request of the reps):", "",
               "| scenario | ferrobase ms | PocketBase ms | PocketBase / ferrobase |", "|---|---:|---:|---:|"]
        for scn in unc:
            cells, meds = [], []
            for kind in ("ferrobase", "pocketbase"):
                xs = [x for r in by.get((scn, kind), []) for x in r.get("uncached_ms") or []]
                meds.append(med(xs))
                cells.append(f"{lat(med(xs))} ({lat(min(xs))}–{lat(max(xs))})" if xs else "–")
            q = f"{meds[1] / meds[0]:.1f}×" if meds[0] and meds[1] else "–"
            md.append(f"| {scn} | {cells[0]} | {cells[1]} | {q} |")
    unsettled = sorted({f"{r['scenario']} {LABEL[r['server']]}" for r in all_rows if r.get("unsettled")})
    if unsettled:
        md += ["", f"**Not idle after the warm-up** (still busy after --settle-max {a.settle_max} s, so the "
               "measured run began with the warm-up's backlog): " + ", ".join(unsettled) + "."]
    if len(a.cores) > 1:
        md += cores_table(all_rows, ctx, a)
    others = [r["other_cpu_pct"] for r in rows if r.get("other_cpu_pct") is not None]
    md += ["", "req/s: successful responses per second, median (min–max) over reps; ⚠ = some errors, a probe "
           "mismatch, or fewer responses than connections (the run was too short for that server's queue); "
           "ratio = median of per-rep ratios. Latencies: medians over reps of wrk's percentiles (requests still "
           "in flight when the run ends are not counted)."]
    if others:
        md.append(f"Other load on the box during measured runs: median {med(others):.0f}%, max {max(others):.0f}% "
                  f"of one core (above ~10% the numbers are noisy).")
    return "\n".join(md) + "\n"


def cores_table(rows, ctx, a):
    """Each server's req/s on one core and on two, and the ferrobase / PocketBase ratio on each."""
    by = {}
    for r in rows:
        if r.get("request_log") is None or r["request_log"] == (not a.no_logs):
            by.setdefault((r["scenario"], r["server"], r.get("cores", 1)), []).append(r)
    md = ["", "**One core vs two** (1c: the server on cpu 0, wrk on cpu 1; 2c: the server and wrk both on "
          "cpus 0 and 1, sharing them; interleaved in each rep; ×: 2c / 1c of the medians):", "",
          "| scenario | ferrobase 1c | ferrobase 2c | × | PocketBase 1c | PocketBase 2c | × | "
          "fb / pb 1c | fb / pb 2c | ratio 2c / 1c |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def rmed(rs):
        return med([r["rps"] for r in rs if r.get("status") != "failed"])

    for scn in ctx["scenarios"]:
        if scn == "ceiling":
            continue
        cells, ratios = [], []
        for kind in ("ferrobase", "pocketbase"):
            one, two = by.get((scn, kind, 1), []), by.get((scn, kind, 2), [])
            m1, m2 = rmed(one), rmed(two)
            cells += [rps_cell(one), rps_cell(two), f"{m2 / m1:.2f}×" if m1 and m2 else "–"]
        for c in (1, 2):
            ratios.append(ratio(by.get((scn, "ferrobase", c), []), by.get((scn, "pocketbase", c), [])))
        vals = [ratio_value(by.get((scn, "ferrobase", c), []), by.get((scn, "pocketbase", c), [])) for c in (1, 2)]
        change = f"{vals[1] / vals[0]:.2f}" if vals[0] and vals[1] else "–"
        md.append("| " + " | ".join([scn] + cells + ratios + [change]) + " |")
    return md


# ---------------------------------------------------------------- main

_PREPARED = {}  # dataset -> prepare_template()'s answer, once per run (--reseed rebuilds each once)


def prepare_template(a, ds):
    if ds not in _PREPARED:
        _PREPARED[ds] = _prepare_template(a, ds)
    return _PREPARED[ds]


def _prepare_template(a, ds):
    out = os.path.join(a.work, "templates", ds)
    if ds in DERIVED:
        src = prepare_template(a, DERIVED[ds])["dir"]
        if ds == "1m_idx":
            facts = seed.with_indexes(a.pb, src, out, INDEX_CREATED, force=a.reseed)
        else:
            facts = seed.scale(a.pb, src, out, DATASETS[ds], force=a.reseed)
    else:
        # The template's own request log stays off (it is shared with realtime.py); each run sets it.
        ns = argparse.Namespace(pb=a.pb, out=out, posts=DATASETS[ds], private=1000, users=50, batch=500,
                                workers=2, seed=42, pb_logs=False, force=a.reseed)
        facts = seed.build(ns)
    users = json.load(open(os.path.join(out, "users.json")))
    owners_file = os.path.join(out, "owners.txt")
    open(owners_file, "w").write("".join(u["id"] + "\n" for u in users))
    emails_file = os.path.join(out, "emails.txt")
    open(emails_file, "w").write("".join(u["email"] + "\n" for u in users))
    ids_file = os.path.join(out, "ids.txt")
    return {"dir": out, "facts": facts, "users": users, "owners_file": owners_file, "ids_file": ids_file,
            "emails_file": emails_file,
            "ids": [line.strip() for line in open(ids_file) if line.strip()],
            "resp_bytes": os.path.getsize(os.path.join(out, "resp_list.json")),
            "user_password": facts["user_password"]}


def filter_expectation(tpl):
    """totalItems the probe's filter must give, counted directly in the template's SQLite."""
    import sqlite3
    con = sqlite3.connect(f"file:{tpl['dir']}/pb_data/data.db?mode=ro", uri=True)
    n = con.execute("SELECT count(*) FROM posts WHERE views > 500 AND title LIKE '%lorem%'").fetchone()[0]
    con.close()
    return n


def sort_expectation(tpl):
    """The ids of the first page of sort=-created, read directly in the template's SQLite (the
    derived templates' `created` values are distinct, so the order is unique)."""
    import sqlite3
    con = sqlite3.connect(f"file:{tpl['dir']}/pb_data/data.db?mode=ro", uri=True)
    ids = [r[0] for r in con.execute("SELECT id FROM posts ORDER BY created DESC LIMIT 30")]
    con.close()
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured run (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warm-up before each measured run (default 3)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per scenario and server (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 s runs, 1 s warm-up, 1 rep")
    ap.add_argument("--only", help="comma-separated scenarios (default: all but the 1,000,000-row ones): "
                    + ",".join(SCENARIOS))
    ap.add_argument("--with-1m", action="store_true",
                    help="add the 1,000,000-row scenarios to the default set (" + ",".join(LARGE) + ")")
    ap.add_argument("--conns-1m", type=int, default=32,
                    help="connections for the 1,000,000-row scenarios (default 32)")
    ap.add_argument("--req-timeout-1m", type=int, default=10,
                    help="wrk per-request timeout in seconds for the 1,000,000-row scenarios (default 10)")
    ap.add_argument("--cores", default="1",
                    help="1: the server on cpu 0, wrk on cpu 1 (default); 2: both on cpus 0 and 1; 1,2: both "
                    "settings interleaved in each rep, with a one core vs two table (the first is the headline)")
    ap.add_argument("--servers", default="ferrobase,pocketbase", help="which of ferrobase,pocketbase,baseline to run")
    ap.add_argument("--conns", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--req-timeout", type=int, default=5, help="wrk per-request timeout in seconds (default 5)")
    ap.add_argument("--server-cpus", default="0", help="taskset cpu list for the server ('' = no pinning)")
    ap.add_argument("--wrk-cpus", default="1", help="taskset cpu list for wrk ('' = no pinning)")
    ap.add_argument("--no-logs", action="store_true",
                    help="request logs off for both servers (logs.maxDays = 0); default: on, as PocketBase "
                    "ships (maxDays 5, minLevel 0)")
    ap.add_argument("--no-logs-compare", action="store_true",
                    help=f"skip the second {LOGS_COMPARE} run with the other request-log setting")
    ap.add_argument("--attack-lead", type=int, default=0,
                    help="list_during_wrong_sign_ins: seconds the wrong passwords run before the list's warm-up "
                    "(default 0: the list is measured from the attack's start)")
    ap.add_argument("--reseed", action="store_true", help="rebuild the data templates even if cached")
    ap.add_argument("--settle-max", type=int, default=60,
                    help="after the warm-up, wait at most this many s for the server to go idle (default 60)")
    ap.add_argument("--start-timeout", type=int, default=60)
    ap.add_argument("--probe-timeout", type=int, default=30)
    ap.add_argument("--root", default=os.path.dirname(HERE), help="the repository (default: bench/..)")
    ap.add_argument("--ferrobase", help="default: ROOT/target/release/ferrobase")
    ap.add_argument("--baseline", help="a second ferrobase binary (an earlier commit's build) run as a third "
                    "server, interleaved, for before / after in one run; adds 'baseline' to --servers")
    ap.add_argument("--ferrobase-config", help="a pb.toml the ferrobase server reads (FERROBASE_CONFIG); default none")
    ap.add_argument("--baseline-config", help="a pb.toml the baseline server reads; with --baseline "
                    "target/release/ferrobase it compares one setting on the same build")
    ap.add_argument("--baseline-label", default="", help="what the baseline is, for the table (e.g. its commit)")
    ap.add_argument("--pb", help="default: ROOT/.venv-ref/bin/pocketbase")
    ap.add_argument("--ceiling", help="default: bench/work/target/release/bench-ceiling")
    ap.add_argument("--work", default=os.path.join(HERE, "work"), help="templates, run copies, logs")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    if a.quick:
        a.duration, a.warmup, a.reps = 3, 1, 1
    a.root = os.path.abspath(a.root)
    a.work = os.path.abspath(a.work)
    a.ferrobase = os.path.abspath(a.ferrobase or os.path.join(a.root, "target", "release", "ferrobase"))
    a.pb = os.path.abspath(a.pb or os.path.join(a.root, ".venv-ref", "bin", "pocketbase"))
    a.ceiling = os.path.abspath(a.ceiling or os.path.join(a.work, "target", "release", "bench-ceiling"))
    a.ferrobase_config = a.ferrobase_config and os.path.abspath(a.ferrobase_config)
    a.baseline_config = a.baseline_config and os.path.abspath(a.baseline_config)

    scenarios = ([s for s in SCENARIOS if a.with_1m or s not in LARGE] if not a.only
                 else [s.strip() for s in a.only.split(",") if s.strip()])
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenario(s) {bad}; known: {', '.join(SCENARIOS)}")
    scenarios = [s for s in SCENARIOS if s in scenarios]  # canonical order: reads first, writes last
    servers = [s.strip() for s in a.servers.split(",") if s.strip()]
    if a.baseline:
        a.baseline = os.path.abspath(a.baseline)
        ver = subprocess.run([a.baseline, "--version"], capture_output=True, text=True).stdout.strip()
        a.baseline_label = a.baseline_label or f"`{ver or os.path.basename(a.baseline)}`"
        if "baseline" not in servers:
            servers.append("baseline")
    elif "baseline" in servers:
        ap.error("--servers baseline needs --baseline PATH")
    if any(s not in SERVERS for s in servers):
        ap.error(f"--servers: pick from {SERVERS}")

    need = ["wrk"] + (["taskset"] if a.server_cpus or a.wrk_cpus else [])
    for tool in need:
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found (bench/run.sh installs wrk; taskset is in util-linux)")
    cpus = os.cpu_count() or 1
    if cpus < 2 and (a.server_cpus or a.wrk_cpus):
        log("only one cpu: pinning off")
        a.server_cpus = a.wrk_cpus = ""
    try:
        a.cores = [int(c) for c in a.cores.split(",") if c.strip()]
    except ValueError:
        a.cores = []
    if not a.cores or any(c not in (1, 2) for c in a.cores) or len(set(a.cores)) != len(a.cores):
        ap.error("--cores: 1, 2, 1,2 or 2,1")
    if 2 in a.cores and cpus < 2:
        ap.error("--cores 2 needs two cpus")
    for path, what in ((a.ferrobase, "ferrobase"), (a.pb, "pocketbase"), (a.baseline, "baseline")):
        if what in servers and not os.access(path, os.X_OK):
            sys.exit(f"bench: {what} binary missing at {path} (bench/run.sh builds/installs it)")
    if "ceiling" in scenarios and not os.access(a.ceiling, os.X_OK):
        sys.exit(f"bench: ceiling server missing at {a.ceiling} (bench/run.sh builds it)")

    run_id = time.strftime("%Y%m%dT%H%M%S")
    ctx = {"a": a, "run_id": run_id, "scenarios": scenarios, "templates": {}}
    ctx["logdir"] = os.path.join(a.work, "logs", run_id)
    os.makedirs(ctx["logdir"], exist_ok=True)
    os.makedirs(a.results, exist_ok=True)

    pb_version = subprocess.run([a.pb, "--version"], capture_output=True, text=True).stdout.strip()
    ctx["static"] = {
        "git": git_info(a.root), "machine": machine_info(), "pocketbase": pb_version,
        "params": {"duration_s": a.duration, "warmup_s": a.warmup, "reps": a.reps, "conns": a.conns,
                   "threads": a.threads, "req_timeout_s": a.req_timeout, "settle_max_s": a.settle_max, "server_cpus": a.server_cpus,
                   "wrk_cpus": a.wrk_cpus},
    }

    for ds in sorted({SCENARIOS[s][0] for s in scenarios}, key=lambda d: DATASETS[d]):
        t0 = time.time()
        ctx["templates"][ds] = prepare_template(a, ds)
        log(f"template {ds}: ready in {time.time() - t0:.1f}s")
    ctx["filter_expect"] = {ds: filter_expectation(ctx["templates"][ds])
                            for ds in {SCENARIOS[s][0] for s in scenarios if s.startswith("filter_sort")}}
    ctx["sort_expect"] = {ds: sort_expectation(ctx["templates"][ds])
                          for ds in {SCENARIOS[s][0] for s in scenarios
                                     if s.startswith("sort_created") or s.startswith("mixed_1m")}}

    main_log = not a.no_logs
    plan = []
    for s in scenarios:
        for rep in range(a.reps):
            for cores in a.cores:
                if s == "ceiling":
                    plan.append((s, "ceiling", rep, None, cores))
                    continue
                plan += [(s, k, rep, main_log, cores) for k in servers]
                if s == LOGS_COMPARE and not a.no_logs_compare and cores == a.cores[0]:
                    plan += [(s, k, rep, not main_log, cores) for k in servers]
    # the 1M runs: a 0.7 GB copy, seconds of uncached probes, and PocketBase's backlog to settle
    est = sum(a.duration + a.warmup + (3 if p[0] not in LARGE else 15 if p[1] != "pocketbase" else 40)
              for p in plan)
    log(f"{len(plan)} runs, about {est // 60} min {est % 60} s; logs in {os.path.relpath(ctx['logdir'])}")

    rows = []
    out_jsonl = os.path.join(a.results, "results.jsonl")
    for i, (scn, kind, rep, request_log, cores) in enumerate(plan, 1):
        row = run_one(a, scn, kind, rep, request_log, ctx, cores)
        rows.append(row)
        with open(out_jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        note = row.get("error") or (row.get("probe") or {}).get("note")
        extra = f"  ({note})" if note else ""
        if row.get("settle_s"):
            extra += f"  settled {row['settle_s']}s"
        logs_note = "" if request_log is None else (" logs on " if request_log else " logs off")
        if len(a.cores) > 1 or cores != 1:
            logs_note += f" {cores}c"
        if row.get("uncached_ms"):
            extra += f"  uncached {row['uncached_ms']} ms"
        log(f"{i}/{len(plan)} {scn:<20} {kind:<10}{logs_note} rep {rep}: {row.get('status'):<8} "
            f"{num(row.get('rps'))} req/s p99 {lat(row.get('lat_p99_ms'))} ms "
            f"rss {num((row.get('peak_rss_kb') or 0) / 1024)} MB other {row.get('other_cpu_pct')}%{extra}")

    md = render(rows, ctx, a)
    open(os.path.join(a.results, "latest.md"), "w").write(md)
    print(md)
    log(f"wrote {os.path.relpath(os.path.join(a.results, 'latest.md'))}, appended {len(rows)} lines to "
        f"{os.path.relpath(out_jsonl)}")


if __name__ == "__main__":
    main()
