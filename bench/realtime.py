#!/usr/bin/env python3
"""bench/: realtime (SSE) under load, ferrobase against PocketBase 0.40.6, side by side.

Normally started through bench/realtime.sh (which builds ferrobase and the load tool
bench/realtime/, a small Rust program that holds the SSE clients):

  bench/realtime.sh                       # every scenario, both servers (about 10-15 min)
  bench/realtime.sh --quick               # small counts, short runs (a smoke test)
  bench/realtime.sh --only memory,fanout --servers ferrobase

Scenarios (each on a fresh copy of the same data dir, the server pinned to cpu 0 and the tool and
wrk to cpu 1, everything on 127.0.0.1):

  memory   server RSS with 0, 10,000 and 50,000 idle guests, each connected and subscribed to
           `posts/*` (the last count is capped by the open-files limit, see --idle-stages)
  breakdown  RSS growth per idle client of each kind, on a fresh server each: a bare TCP
           connection, a keep-alive connection that answered GET /api/health, an SSE stream
           without subscription, a subscribed stream (10,000 of each): where the memory goes
  list     list_1k (wrk, GET /api/collections/posts/records) with no SSE client, then with
           10,000 idle ones attached, then with none again (the ratio uses the mean of the two)
  fanout   10,000 users, each signed in with its own token and subscribed to `rt_posts/*`
           (listRule `owner = @request.auth.id || public = true`); 20 creates, one at a time:
           time from each create's 200 to its last delivery, p50 and p99
  sustain  1,000 such subscribers, 500 creates/s for 10 s from 16 writers: delivered events/s,
           delivery latency (from the create sent), lost and reordered events per subscriber
  floor    no server: bench/realtime/floor.c (built with gcc) writes one event-sized chunk to each
           of 10,000 loopback connections from the server's cpu, read on the tool's cpu, 20
           rounds: the fan-out's p50 and p99 on this machine with nothing but the writes in it.
           Run once, not per server; reported under the table

Results: the table on stdout and in results/realtime-latest.md (and realtime-<run id>.md); one
JSON line per scenario and server appended to results/realtime.jsonl.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import bench  # noqa: E402  (Server, wrk, /proc sampling)
import common  # noqa: E402
import seed  # noqa: E402

RT_FORMAT = 1  # bump when the realtime template's contents change
RT_COLLECTION = "rt_posts"
RT_RULE = "owner = @request.auth.id || public = true"
RT_PASSWORD = "rtpass123456"
RT_COST = 4  # bcrypt cost of the rt users' passwords: 10,000 sign-ins take seconds, not minutes
SCENARIOS = ("memory", "breakdown", "list", "fanout", "sustain", "floor")
SERVERS = ("ferrobase", "pocketbase", "baseline")
LABEL = {"ferrobase": "ferrobase", "pocketbase": "PocketBase", "baseline": "baseline"}
log = bench.log


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------- the data

def build_template(a):
    """The 1k template of bench/seed.py plus, written by PocketBase: the users' password cost
    lowered to RT_COST, a.users users rt<i>@bench.test, and `rt_posts` (title, public, owner) under
    RT_RULE. Cached in work/templates/rt/ until its parameters change."""
    base_tpl = os.path.join(a.work, "templates", "1k")
    seed.build(argparse.Namespace(pb=a.pb, out=base_tpl, posts=1000, private=1000, users=50, batch=500,
                                  workers=2, seed=42, pb_logs=False, force=False))
    out = os.path.join(a.work, "templates", "rt")
    pb_version = subprocess.run([a.pb, "--version"], capture_output=True, text=True).stdout.strip()
    base_facts = json.load(open(os.path.join(base_tpl, "setup.json")))
    wanted = {"rt_format": RT_FORMAT, "users": a.users, "pocketbase": pb_version, "base": base_facts["params"]}
    try:
        if json.load(open(os.path.join(out, "setup.json")))["params"] == wanted:
            log(f"realtime template: reusing {os.path.relpath(out)}")
            return out
    except (OSError, ValueError, KeyError):
        pass
    t0 = time.time()
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    shutil.copytree(os.path.join(base_tpl, "pb_data"), os.path.join(out, "pb_data"))
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    logf = open(os.path.join(out, "seed-pocketbase.log"), "w")
    proc = subprocess.Popen([a.pb, "serve", "--http", f"127.0.0.1:{port}", "--dir", "pb_data", "--automigrate=false"],
                            stdout=logf, stderr=subprocess.STDOUT, cwd=out)
    try:
        common.wait_healthy(base, proc, timeout=60)
        su = common.auth(base, "_superusers", seed.SUPERUSER_EMAIL, seed.SUPERUSER_PASSWORD)
        st, raw = common.http("GET", base + "/api/collections/users", token=su)
        if st != 200:
            sys.exit(f"users collection: HTTP {st} {raw[:300]!r}")
        users_c = json.loads(raw)
        for f in users_c["fields"]:
            if f["name"] == "password":
                f["cost"] = RT_COST
        st, raw = common.http("PATCH", base + "/api/collections/users", {"fields": users_c["fields"]}, su)
        if st != 200:
            sys.exit(f"users password cost: HTTP {st} {raw[:300]!r}")
        coll = {"name": RT_COLLECTION, "type": "base", "listRule": RT_RULE, "viewRule": RT_RULE,
                "createRule": None, "updateRule": None, "deleteRule": None,
                "fields": [{"name": "title", "type": "text"}, {"name": "public", "type": "bool"},
                           {"name": "owner", "type": "relation", "collectionId": users_c["id"], "maxSelect": 1}]}
        st, raw = common.http("POST", base + "/api/collections", coll, su)
        if st != 200:
            sys.exit(f"create {RT_COLLECTION}: HTTP {st} {raw[:300]!r}")
        users = [{"email": f"rt{i}@bench.test", "password": RT_PASSWORD, "passwordConfirm": RT_PASSWORD,
                  "name": f"RT {i}", "verified": True} for i in range(a.users)]
        seed.batch_create(base, su, "users", users, 500, 2)
        got = seed.total_items(base, "users", su)
        if got != a.users + 50:
            sys.exit(f"verify: users has {got} records, expected {a.users + 50}")
        # one sign-in proves the low cost took
        common.auth(base, "users", "rt0@bench.test", RT_PASSWORD)
    finally:
        common.stop(proc)
        logf.close()
    json.dump({"params": wanted, "seconds": round(time.time() - t0, 1)}, open(os.path.join(out, "setup.json"), "w"))
    log(f"realtime template: built {os.path.relpath(out)} in {time.time() - t0:.1f}s")
    return out


# ---------------------------------------------------------------- the tool

def tool_cmd(a, cmd, base, *extra):
    out = [a.tool, cmd, "--base", base, "--ips", str(a.ips), "--max-seconds", str(a.tool_max_seconds), *map(str, extra)]
    if a.wrk_cpus:
        out = ["taskset", "-c", a.wrk_cpus] + out
    return out


def run_tool(a, cmd, base, logpath, *extra, server_pid=None):
    """One tool run to its end; returns its last JSON line. With `server_pid`, also the server's
    CPU time (utime + stime) from the tool's "subscribed" log line to its last "write" line, i.e.
    over the writes alone (`writes_server_cpu_s`, and `writes_seen`): a figure that the box's other
    load inflates far less than the latencies."""
    mark = {}
    hz = os.sysconf("SC_CLK_TCK")

    def follow(stream, err):
        for line in stream:
            err.write(line)
            err.flush()
            if server_pid is None:
                continue
            if "subscribed" in line and "t0" not in mark:
                mark["t0"] = bench.proc_ticks(server_pid)
            elif line.startswith("[bench-realtime] write ") and "t0" in mark:
                mark["t1"] = bench.proc_ticks(server_pid)
                mark["n"] = mark.get("n", 0) + 1

    with open(logpath, "w") as err:
        proc = subprocess.Popen(tool_cmd(a, cmd, base, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        # stderr is this thread's alone (communicate() would read it too and steal lines).
        reader = threading.Thread(target=follow, args=(proc.stderr, err), daemon=True)
        reader.start()
        killed = []

        def kill():
            killed.append(True)
            proc.kill()

        timer = threading.Timer(a.tool_max_seconds + 30, kill)
        timer.start()
        out = proc.stdout.read()
        proc.wait()
        timer.cancel()
        reader.join(timeout=10)
        if killed:
            return {"error": f"{cmd}: the tool did not finish in time (killed)"}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    r = json.loads(lines[-1]) if lines else {"error": f"{cmd}: no output (rc={proc.returncode})"}
    if mark.get("t0") is not None and mark.get("t1") is not None:
        r["writes_server_cpu_s"] = round((mark["t1"] - mark["t0"]) / hz, 2)
        r["writes_seen"] = mark["n"]
    return r


class Idle:
    """The tool's `idle` command, stage by stage: `next_stage()` returns its JSON line once that
    many clients are connected and subscribed."""

    def __init__(self, a, base, stages, logpath, kind="subscribed"):
        self.err = open(logpath, "w")
        self.proc = subprocess.Popen(tool_cmd(a, "idle", base, "--stages", ",".join(map(str, stages)),
                                              "--topic", "posts/*", "--kind", kind),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.first = True

    def next_stage(self):
        if not self.first:
            self.proc.stdin.write("next\n")
            self.proc.stdin.flush()
        self.first = False
        line = self.proc.stdout.readline()
        return json.loads(line) if line.startswith("{") else {"error": "idle tool ended early"}

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def rss_kb(pid):
    return bench.proc_status_kb(pid, "VmRSS")


def quiet_rss(pid, settle_max):
    """VmRSS once the server has gone idle (at most settle_max s), after a short pause."""
    bench.settle(pid, settle_max)
    time.sleep(1)
    return rss_kb(pid)


# ---------------------------------------------------------------- scenarios

def sc_memory(a, srv, row, logdir):
    stages = a.idle_stages
    row["rss_kb"] = {"0": quiet_rss(srv.pid, a.settle_max)}
    row["stages"] = []
    idle = Idle(a, srv.base, stages, os.path.join(logdir, f"memory-{srv.kind}-tool.log"))
    try:
        for n in stages:
            st = idle.next_stage()
            st["rss_kb"] = quiet_rss(srv.pid, a.settle_max)
            st["load"] = loadavg()
            row["stages"].append(st)
            row["rss_kb"][str(n)] = st["rss_kb"]
            log(f"  {srv.kind}: {st.get('ready')} idle clients ({st.get('failed')} failed) in {st.get('seconds')} s: "
                f"RSS {st['rss_kb'] / 1024:.1f} MB")
            if st.get("error") or st.get("ready", 0) < n:
                row["error"] = st.get("error") or f"only {st.get('ready')} of {n} clients: {st.get('first_error')}"
                break
    finally:
        idle.close()
    base = row["rss_kb"]["0"]
    row["per_client_bytes"] = {k: round((v - base) * 1024 / int(k)) for k, v in row["rss_kb"].items() if k != "0"}


BREAKDOWN = ("raw", "keepalive", "stream", "subscribed")


def sc_breakdown(a, kind, row, ctx):
    """Where an idle stream's memory goes: per kind of idle client (a bare connection, one that
    answered GET /api/health and waits, a stream without subscription, a subscribed stream), a
    fresh server's RSS growth over a.list_idle such clients."""
    row["per_client_bytes"], row["rss_kb"] = {}, {}
    for k in BREAKDOWN:
        srv = bench.Server(kind, a, ctx["template"], os.path.join(ctx["logdir"], f"breakdown-{kind}-{k}.log"))
        try:
            before = quiet_rss(srv.pid, a.settle_max)
            idle = Idle(a, srv.base, [a.list_idle], os.path.join(ctx["logdir"], f"breakdown-{kind}-{k}-tool.log"), k)
            try:
                st = idle.next_stage()
                after = quiet_rss(srv.pid, a.settle_max)
            finally:
                idle.close()
        finally:
            srv.stop()
        if st.get("ready", 0) < a.list_idle:
            row["error"] = f"{k}: only {st.get('ready')} of {a.list_idle} clients: {st.get('first_error')}"
            return
        row["rss_kb"][k] = [before, after]
        row["per_client_bytes"][k] = round((after - before) * 1024 / a.list_idle)
        log(f"  {kind}: {a.list_idle} idle {k}: RSS {before / 1024:.1f} -> {after / 1024:.1f} MB, "
            f"{row['per_client_bytes'][k] / 1024:.1f} KiB each")


def sc_list(a, srv, row, logdir):
    env = dict(os.environ, BENCH_LUA_DIR=os.path.join(HERE, "lua"))
    res = {}
    # none, idle, none again: the idle run is compared with the mean of the runs around it, so a
    # server that warms up (or a box whose load drifts) does not favour either side.
    for label in ("none", "idle", "none2"):
        idle = None
        if label == "idle":
            idle = Idle(a, srv.base, [a.list_idle], os.path.join(logdir, f"list-{srv.kind}-tool.log"))
            st = idle.next_stage()
            if st.get("ready", 0) < a.list_idle:
                idle.close()
                row["error"] = f"only {st.get('ready')} of {a.list_idle} idle clients: {st.get('first_error')}"
                return
        try:
            r = {}
            bench.measure(a, "get.lua", srv.base, bench.LIST, srv.proc, env, env, r)
            r["load"] = loadavg()
            res[label] = r
            log(f"  {srv.kind}: list_1k with {'no' if label != 'idle' else a.list_idle} SSE clients: {r.get('rps')} req/s ({r.get('status')}), "
                f"other load {r.get('other_cpu_pct')}%")
        finally:
            if idle:
                idle.close()
    row["runs"] = res
    nones = [res[k]["rps"] for k in ("none", "none2") if res.get(k, {}).get("rps")]
    if nones and res.get("idle", {}).get("rps"):
        row["rps_none_mean"] = round(sum(nones) / len(nones), 1)
        row["ratio"] = round(res["idle"]["rps"] / row["rps_none_mean"], 4)


def sc_fanout(a, srv, row, logdir):
    r = run_tool(a, "fanout", srv.base, os.path.join(logdir, f"fanout-{srv.kind}-tool.log"),
                 "--users", a.fan_users, "--writes", a.fan_writes, "--collection", RT_COLLECTION,
                 "--password", RT_PASSWORD, "--su-email", seed.SUPERUSER_EMAIL, "--su-password", seed.SUPERUSER_PASSWORD,
                 server_pid=srv.pid)
    row.update(r)


def sc_sustain(a, srv, row, logdir):
    r = run_tool(a, "sustain", srv.base, os.path.join(logdir, f"sustain-{srv.kind}-tool.log"),
                 "--users", a.sus_users, "--rate", a.sus_rate, "--seconds", a.sus_seconds,
                 "--writers", a.sus_writers, "--collection", RT_COLLECTION, "--password", RT_PASSWORD,
                 "--su-email", seed.SUPERUSER_EMAIL, "--su-password", seed.SUPERUSER_PASSWORD)
    row.update(r)


def sc_floor(a, row, logdir):
    """The fan-out with no server in it (see floor.c): built here, run once."""
    exe = os.path.join(a.work, "floor")
    src = os.path.join(HERE, "realtime", "floor.c")
    build = subprocess.run(["gcc", "-O2", "-o", exe, src], capture_output=True, text=True)
    if build.returncode != 0:
        raise RuntimeError(f"gcc floor.c: {build.stderr.strip()[:300]}")
    cpu = lambda cpus: str(cpus or "0").split(",")[0].split("-")[0]  # noqa: E731
    cmd = [exe, str(a.fan_users), str(a.floor_bytes), str(a.fan_writes), cpu(a.server_cpus), cpu(a.wrk_cpus), "300"]
    with open(os.path.join(logdir, "floor.log"), "w") as err:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=a.tool_max_seconds)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"floor exited {out.returncode} (see floor.log)")
    row.update(json.loads(lines[-1]))


RUNNERS = {"memory": sc_memory, "list": sc_list, "fanout": sc_fanout, "sustain": sc_sustain}


def run_one(a, scn, kind, ctx):
    row = {"ts": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "run_id": ctx["run_id"], "bench": "realtime", "scenario": scn, "server": kind,
           "load_before": loadavg(), **ctx["static"]}
    if scn in ("breakdown", "floor"):
        t0 = time.time()
        try:
            if scn == "floor":
                sc_floor(a, row, ctx["logdir"])
            else:
                sc_breakdown(a, kind, row, ctx)
        except (RuntimeError, OSError, ValueError) as e:
            row["error"] = f"{type(e).__name__}: {e}"
        row["seconds"] = round(time.time() - t0, 1)
        row["load_after"] = loadavg()
        row["status"] = "failed" if row.get("error") else "ok"
        return row
    try:
        srv = bench.Server(kind, a, ctx["template"], os.path.join(ctx["logdir"], f"{scn}-{kind}.log"))
    except (RuntimeError, OSError) as e:
        row.update(status="failed", error=f"start: {e}")
        return row
    t0 = time.time()
    ticks0, busy0 = bench.proc_ticks(srv.pid), bench.busy_ticks()
    try:
        RUNNERS[scn](a, srv, row, ctx["logdir"])
    except (RuntimeError, OSError, ValueError) as e:
        row["error"] = f"{type(e).__name__}: {e}"
    finally:
        # CPU over the whole run (sign-ins and connects included): the server's, and the box's
        # (both cores) for comparison; the box is shared, so a busy box shows here.
        ticks1, busy1, hz = bench.proc_ticks(srv.pid), bench.busy_ticks(), os.sysconf("SC_CLK_TCK")
        if ticks0 is not None and ticks1 is not None:
            row["server_cpu_s"] = round((ticks1 - ticks0) / hz, 2)
        row["box_busy_cpu_s"] = round((busy1 - busy0) / hz, 2)
        row["peak_rss_kb"] = bench.proc_status_kb(srv.pid, "VmHWM")
        row["server_alive"] = srv.proc.poll() is None
        srv.stop()
    row["seconds"] = round(time.time() - t0, 1)
    row["load_after"] = loadavg()
    row["status"] = "failed" if row.get("error") else "ok"
    return row


# ---------------------------------------------------------------- the table

def fmt(x, nd=0, unit=""):
    if x is None or (isinstance(x, float) and x != x):
        return "–"
    return f"{x:,.{nd}f}{unit}"


def render(rows, ctx, a):
    by = {(r["scenario"], r["server"]): r for r in rows}
    servers = ctx["servers"]
    head = "| | " + " | ".join(LABEL[s] for s in servers) + " | goal (ferrobase) |"
    sep = "|---|" + "---:|" * len(servers) + "---|"
    out = [f"# realtime: ferrobase vs PocketBase ({ctx['static']['pocketbase']})", "",
           f"run {ctx['run_id']}, commit {ctx['static']['git']['commit'][:9]}"
           f"{' (dirty)' if ctx['static']['git']['dirty'] else ''}; server pinned to cpu {a.server_cpus or '-'}, "
           f"tool and wrk to cpu {a.wrk_cpus or '-'}; load average at start {ctx['static']['machine']['loadavg_at_start']}",
           "", f"command: `{ctx['command']}`", "", head, sep]

    def cell(scn, s, f):
        r = by.get((scn, s))
        if r is None:
            return "–"
        if r.get("status") == "failed" and f(r) in (None, "–"):
            return f"FAILED ({str(r.get('error'))[:80]})"
        v = f(r)
        return "–" if v is None else v

    def line(label, scn, f, goal=""):
        out.append(f"| {label} | " + " | ".join(cell(scn, s, f) for s in servers) + f" | {goal} |")

    if "memory" in ctx["scenarios"]:
        line("RSS, no SSE client", "memory", lambda r: fmt((r.get("rss_kb") or {}).get("0", 0) / 1024, 1, " MB"))
        for n in a.idle_stages:
            k = str(n)
            line(f"RSS, {n:,} idle clients", "memory",
                 lambda r, k=k: fmt(r["rss_kb"][k] / 1024, 1, " MB") if k in r.get("rss_kb", {}) else None)
            line(f"  per idle client ({n:,})", "memory",
                 lambda r, k=k: fmt(r["per_client_bytes"][k] / 1024, 1, " KiB")
                 if k in r.get("per_client_bytes", {}) else None, "≤ 8 KiB")
    if "breakdown" in ctx["scenarios"]:
        for k, what in (("raw", "a bare connection"), ("keepalive", "a keep-alive connection after one GET"),
                        ("stream", "an SSE stream, no subscription"), ("subscribed", "a subscribed SSE stream")):
            line(f"memory per idle {what} ({a.list_idle:,})", "breakdown",
                 lambda r, k=k: fmt(r["per_client_bytes"][k] / 1024, 1, " KiB")
                 if k in r.get("per_client_bytes", {}) else None)
    if "list" in ctx["scenarios"]:
        line("list_1k req/s, no SSE client (before / after)", "list",
             lambda r: f"{fmt(r.get('runs', {}).get('none', {}).get('rps'))} / "
                       f"{fmt(r.get('runs', {}).get('none2', {}).get('rps'))}" if r.get("runs") else None)
        line(f"list_1k req/s, {a.list_idle:,} idle clients", "list",
             lambda r: fmt(r.get("runs", {}).get("idle", {}).get("rps")))
        line("  ratio", "list", lambda r: fmt(100 * r["ratio"], 1, "%") if r.get("ratio") else None, "≥ 90%")
    if "fanout" in ctx["scenarios"]:
        line(f"fan-out to {a.fan_users:,}: 200 → last delivery p50", "fanout", lambda r: fmt(r.get("p50_ms"), 1, " ms"))
        line("  p99", "fanout", lambda r: fmt(r.get("p99_ms"), 1, " ms"), "≤ 100 ms")
        line("  first delivery after the 200: p50", "fanout", lambda r: fmt(r.get("first_p50_ms"), 1, " ms"))
        line("  from the create sent: p50 / p99", "fanout",
             lambda r: f"{fmt(r.get('from_sent_p50_ms'), 1)} / {fmt(r.get('from_sent_p99_ms'), 1)} ms"
             if "from_sent_p99_ms" in r else None)
        line("  server CPU per write (over the writes only)", "fanout",
             lambda r: f"{fmt(1000 * r['writes_server_cpu_s'] / r['writes_seen'], 0)} ms"
             if r.get("writes_seen") else None)
        line("  writes fully delivered", "fanout",
             lambda r: f"{r['complete_writes']}/{r['writes']}" if "writes" in r else None)
    if "sustain" in ctx["scenarios"]:
        line(f"sustained: creates/s (target {a.sus_rate:g})", "sustain", lambda r: fmt(r.get("creates_per_s"), 0))
        line(f"  delivered events/s ({a.sus_users:,} subscribers)", "sustain",
             lambda r: fmt(r.get("delivered_per_s"), 0))
        line("  delivery latency p50 / p99", "sustain",
             lambda r: f"{fmt(r.get('lat_p50_ms'), 1)} / {fmt(r.get('lat_p99_ms'), 1)} ms" if "lat_p99_ms" in r else None)
        line("  delivered / expected", "sustain",
             lambda r: f"{r['delivered']:,} / {r['delivered_expected']:,}" if "delivered" in r else None)
        line("  lost (kept-up subscribers) / reordered / disconnected", "sustain",
             lambda r: f"{r['lost_events_kept_up']:,} / {r['out_of_order']:,} / {r['closed_streams']:,}"
             if "delivered" in r else None, "0 / 0 / 0")
    floor = by.get(("floor", "machine"))
    if floor:
        out.append("")
        if floor.get("status") == "ok":
            out.append(f"The machine's floor for the fan-out (`floor`, no server: {floor['conns']:,} "
                       f"{floor['bytes']}-byte chunks written from cpu {a.server_cpus or '-'} to loopback "
                       f"connections read on cpu {a.wrk_cpus or '-'}, {floor['rounds']} rounds): first write to "
                       f"last receipt p50 {fmt(floor['p50_ms'], 1)} ms, p99 {fmt(floor['p99_ms'], 1)} ms "
                       f"(fastest {fmt(floor['min_ms'], 1)} ms); {fmt(floor['us_per_write'], 2)} µs of the "
                       "writer's time per write.")
        else:
            out.append(f"The machine's floor for the fan-out: FAILED ({floor.get('error')})")
    out.append("")
    out.append(f"uptime at start: {ctx['uptime']}")
    out.append("")
    out.append("Server CPU / whole box CPU (both cores) over each run, in s: " + "; ".join(
        f"{r['scenario']} {r['server']} {r.get('server_cpu_s', '–')} / {r.get('box_busy_cpu_s', '–')} in {r.get('seconds')} s"
        for r in rows if "seconds" in r))
    out.append("")
    out.append("Load average (1 min) before → after each run: " + "; ".join(
        f"{r['scenario']} {r['server']} {r['load_before'][0]} → {r['load_after'][0]}" for r in rows))
    other = [f"{r['server']} {k} {v.get('other_cpu_pct')}%" for r in rows if r["scenario"] == "list"
             for k, v in r.get("runs", {}).items()]
    if other:
        out.append("")
        out.append("Other load during the list runs (CPU of everything but server and wrk, % of a core): "
                   + ", ".join(other))
    if a.idle_capped:
        out.append("")
        out.append(f"Idle stages capped at {a.idle_stages[-1]:,} by the open-files hard limit ({a.fd_hard:,}): "
                   f"asked for {a.idle_asked[-1]:,}.")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated scenarios (default: all): " + ",".join(SCENARIOS))
    ap.add_argument("--servers", default="ferrobase,pocketbase")
    ap.add_argument("--quick", action="store_true", help="smoke test: small counts, 3 s list runs")
    ap.add_argument("--idle-stages", default="10000,50000", help="idle client counts for `memory` (default 10000,50000)")
    ap.add_argument("--list-idle", type=int, default=10000, help="idle clients during the second list run")
    ap.add_argument("--users", type=int, default=10000, help="rt users in the template (default 10000)")
    ap.add_argument("--fan-users", type=int, default=10000)
    ap.add_argument("--fan-writes", type=int, default=20)
    ap.add_argument("--floor-bytes", type=int, default=250,
                    help="bytes per chunk in `floor` (default 250: the fan-out event as written, chunk framing included)")
    ap.add_argument("--sus-users", type=int, default=1000)
    ap.add_argument("--sus-rate", type=float, default=500)
    ap.add_argument("--sus-seconds", type=float, default=10)
    ap.add_argument("--sus-writers", type=int, default=16)
    ap.add_argument("--ips", type=int, default=32, help="source addresses 127.0.0.2.. for the clients")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured list run (default 10)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--conns", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--req-timeout", type=int, default=5)
    ap.add_argument("--settle-max", type=int, default=60)
    ap.add_argument("--start-timeout", type=int, default=60)
    ap.add_argument("--tool-max-seconds", type=int, default=280,
                    help="bound on one tool run (PocketBase closes streams idle for 5 minutes)")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--wrk-cpus", default="1", help="cpus of wrk and of the load tool")
    ap.add_argument("--root", default=os.path.dirname(HERE))
    ap.add_argument("--ferrobase")
    ap.add_argument("--pb")
    ap.add_argument("--baseline", help="a second ferrobase binary (an earlier commit's build) run as a third "
                    "server after ferrobase in each scenario: before / after in one run")
    ap.add_argument("--tool", help="default: bench/work/target/release/bench-realtime")
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    command = "bench/realtime.sh " + " ".join(sys.argv[1:] if sys.argv[1:3] != ["--root", a.root] else sys.argv[3:])
    if a.quick:
        a.idle_stages, a.list_idle, a.fan_users, a.fan_writes = "500,1000", 500, 500, 5
        a.sus_users, a.sus_rate, a.sus_seconds, a.duration, a.warmup = 100, 100, 3, 3, 1
    a.root = os.path.abspath(a.root)
    a.work = os.path.abspath(a.work)
    a.ferrobase = os.path.abspath(a.ferrobase or os.path.join(a.root, "target", "release", "ferrobase"))
    a.pb = os.path.abspath(a.pb or os.path.join(a.root, ".venv-ref", "bin", "pocketbase"))
    a.tool = os.path.abspath(a.tool or os.path.join(a.work, "target", "release", "bench-realtime"))
    a.pb_logs = False
    scenarios = [s for s in SCENARIOS if not a.only or s in a.only.split(",")]
    servers = [s for s in a.servers.split(",") if s]
    if a.baseline:
        a.baseline = os.path.abspath(a.baseline)
        if "baseline" not in servers:
            servers.append("baseline")
    elif "baseline" in servers:
        ap.error("--servers baseline needs --baseline PATH")
    if any(s not in SERVERS for s in servers):
        ap.error(f"--servers: pick from {SERVERS}")
    if a.fan_users > a.users or a.sus_users > a.users:
        ap.error("--fan-users and --sus-users must not exceed --users")

    # Every client is a descriptor in the tool and in the server: raise the soft limit to the hard
    # one here (the servers and the tool inherit it), and cap the idle stages to what it allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    a.fd_hard = hard
    a.idle_asked = [int(x) for x in str(a.idle_stages).split(",") if x]
    cap = max(hard - 1000, 100)
    a.idle_stages = sorted({min(n, cap) for n in a.idle_asked})
    a.idle_capped = a.idle_stages != a.idle_asked
    if a.idle_capped:
        log(f"open-files hard limit {hard}: idle stages {a.idle_asked} capped to {a.idle_stages}")
    a.list_idle = min(a.list_idle, cap)

    run_id = time.strftime("%Y%m%dT%H%M%S")
    ctx = {"run_id": run_id, "scenarios": scenarios, "servers": servers, "command": command}
    ctx["logdir"] = os.path.join(a.work, "logs", "realtime-" + run_id)
    os.makedirs(ctx["logdir"], exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    ctx["template"] = build_template(a)
    pb_version = subprocess.run([a.pb, "--version"], capture_output=True, text=True).stdout.strip()
    ctx["static"] = {"git": bench.git_info(a.root), "machine": bench.machine_info(), "pocketbase": pb_version,
                     "fd_limit": hard,
                     "params": {k: getattr(a, k) for k in ("idle_stages", "list_idle", "fan_users", "fan_writes",
                                                           "sus_users", "sus_rate", "sus_seconds", "sus_writers",
                                                           "ips", "duration", "warmup", "conns", "server_cpus",
                                                           "wrk_cpus")}}
    ctx["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    log(f"uptime: {ctx['uptime']}")
    rows = []
    out_jsonl = os.path.join(a.results, "realtime.jsonl")
    for scn in scenarios:
        for kind in (["machine"] if scn == "floor" else servers):
            log(f"{scn} on {kind} (load {loadavg()})")
            row = run_one(a, scn, kind, ctx)
            rows.append(row)
            with open(out_jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
            log(f"{scn} on {kind}: {row['status']}{' (' + str(row.get('error')) + ')' if row.get('error') else ''}"
                f" in {row['seconds']} s")
    md = render(rows, ctx, a)
    for name in ("realtime-latest.md", f"realtime-{run_id}.md"):
        open(os.path.join(a.results, name), "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
