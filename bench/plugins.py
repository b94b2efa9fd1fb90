#!/usr/bin/env python3
"""bench/: what wasm plugins cost over HTTP, ferrobase with plugins against ferrobase without.

Normally started through bench/plugins.sh (which builds the server and the example plugins and
runs the in-process plugin bench first):

  bench/plugins.sh                       # both scenarios, 3 reps of 10 s after 3 s warm-up
  bench/plugins.sh --quick               # 1 rep of 3 s (a smoke test)

Scenarios (each mode on a fresh copy of the same data dir; modes interleaved per repetition):

  create   POST /api/collections/posts/records {"title":"Hello World <n>"}: no plugins vs slugger
           (a before-create hook that fills `slug`). Goal: >= 85% of the hook-free rate.
  list     GET /api/collections/posts/records?perPage=30 (1,000 posts): no plugins vs slugger,
           posts_api and audit loaded. Goal: >= 97%.

Server pinned to cpu 0, wrk (-t2 -c400) to cpu 1, as bench/run.sh does; everything on 127.0.0.1.
Results: the table on stdout and in results/plugins-latest.md (and results/plugins-<run id>.md);
one JSON line per run appended to results/plugins.jsonl.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import bench  # noqa: E402  (wrk, /proc sampling, table cells)
import common  # noqa: E402

LIST = "/api/collections/posts/records"
SU_EMAIL, SU_PASS = "bench@example.com", "bench-password-123"
POSTS = 1000

# scenario -> (wrk script, path, [(mode, plugin files)], goal ratio)
SCENARIOS = {
    "create": ("plugins_create.lua", LIST, [("none", []), ("slugger", ["slugger"])], 0.85),
    "list": ("get.lua", LIST + "?perPage=30",
             [("none", []), ("slugger+posts_api+audit", ["slugger", "posts_api", "audit"])], 0.97),
}
PB_TOML = """# written by bench/plugins.py
[plugins.audit]
grants = ["db:write", "kv"]

[plugins.posts-api]
grants = ["db:read"]

[plugins.slugger]
grants = []
"""


def slugify(title):
    """slugger's rule, to check the probe's answer."""
    out, dash = [], False
    for c in title.lower():
        if c.isascii() and c.isalnum():
            if dash and out:
                out.append("-")
            dash = False
            out.append(c)
        else:
            dash = True
    return "".join(out)[:60].rstrip("-")


def wasm_path(root, name):
    return os.path.join(root, "plugins", "target", "wasm32-wasip2", "release", name + ".wasm")


def start(a, rundir, port, log):
    cmd = [a.ferrobase, "serve", "--http", f"127.0.0.1:{port}", "--dir", "pb_data",
           "--pluginsDir", "plugins", "--config", "pb.toml"]
    if a.server_cpus:
        cmd = ["taskset", "-c", a.server_cpus] + cmd
    env = dict(os.environ)
    for k in ("FERROBASE_CONFIG", "FERROBASE_DIR", "FERROBASE_PLUGINS_DIR", "FERROBASE_HTTP"):
        env.pop(k, None)
    return subprocess.Popen(cmd, cwd=rundir, stdout=log, stderr=subprocess.STDOUT, env=env)


def make_template(a):
    """pb_data with a superuser, `posts` (title, slug, note, status; every rule "") holding POSTS
    records (slugs given), and `audit_log` (action, record). Written by ferrobase itself."""
    tpl = os.path.join(a.work, "plugins-template")
    if os.path.exists(tpl):
        shutil.rmtree(tpl)
    os.makedirs(os.path.join(tpl, "plugins"))
    open(os.path.join(tpl, "pb.toml"), "w").write(PB_TOML)
    r = subprocess.run([a.ferrobase, "superuser", "upsert", SU_EMAIL, SU_PASS, "--dir", "pb_data"],
                       cwd=tpl, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"superuser upsert failed: {r.stderr or r.stdout}")
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(a.logdir, "template.log"), "w")
    proc = start(a, tpl, port, log)
    try:
        common.wait_healthy(base, proc, timeout=a.start_timeout)
        tok = common.auth(base, "_superusers", SU_EMAIL, SU_PASS)
        text = lambda n: {"name": n, "type": "text"}  # noqa: E731
        for body in (
            {"name": "posts", "type": "base", "listRule": "", "viewRule": "", "createRule": "",
             "updateRule": "", "deleteRule": "", "fields": [text("title"), text("slug"), text("note"), text("status")]},
            {"name": "audit_log", "type": "base", "fields": [text("action"), text("record")]},
        ):
            st, raw = common.http("POST", base + "/api/collections", body, token=tok)
            if st != 200:
                sys.exit(f"creating {body['name']}: HTTP {st} {raw[:300]!r}")
        for i in range(POSTS):
            title = f"Seeded post {i} " + " ".join(common.WORDS[(i * 7 + k) % len(common.WORDS)] for k in range(4))
            st, raw = common.http("POST", base + LIST, {"title": title, "slug": slugify(title),
                                                         "note": "seeded", "status": ("draft", "published")[i % 2]})
            if st != 200:
                sys.exit(f"seeding post {i}: HTTP {st} {raw[:300]!r}")
    finally:
        common.stop(proc)
        log.close()
    return tpl


def probe(scn, mode, base, tok, plugins):
    notes = []
    st, raw = common.http("GET", base + "/api/plugins", token=tok, timeout=30)
    loaded = sorted(p["name"] for p in json.loads(raw).get("plugins", [])
                    if p.get("state", "loaded") == "loaded") if st == 200 else None
    want = sorted(p.replace("_", "-") for p in plugins)
    if loaded != want:
        notes.append(f"plugins loaded {loaded}, expected {want}; report: {raw[:400]!r}")
    if scn == "create":
        title = "Hello, Probe World!"
        st, raw = common.http("POST", base + LIST, {"title": title}, timeout=30)
        if st == 200:
            slug = json.loads(raw).get("slug")
            expect = slugify(title) if "slugger" in plugins else ""
            if slug != expect:
                notes.append(f"slug {slug!r}, expected {expect!r}")
    else:
        st, raw = common.http("GET", base + LIST + "?perPage=30", timeout=30)
        if st == 200:
            j = json.loads(raw)
            if j.get("totalItems") != POSTS or len(j.get("items", [])) != 30:
                notes.append(f"totalItems {j.get('totalItems')}, {len(j.get('items', []))} items")
    if not 200 <= st < 300:
        notes.append(f"HTTP {st}: {raw[:200]!r}")
    return {"status": st, "ok": not notes, "note": "; ".join(notes), "loaded": loaded}


def run_one(a, scn, mode, plugins, rep, ctx):
    script, path, _, _ = SCENARIOS[scn]
    row = {"ts": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "run_id": ctx["run_id"], "bench": "plugins", "scenario": scn, "mode": mode, "plugins": plugins,
           "rep": rep, "records": POSTS, **ctx["static"]}
    rundir = os.path.join(a.work, "run", "plugins")
    if os.path.exists(rundir):
        shutil.rmtree(rundir)
    shutil.copytree(ctx["template"], rundir)
    for p in plugins:
        shutil.copy(wasm_path(a.root, p), os.path.join(rundir, "plugins"))
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(a.logdir, f"{scn}-{mode}-{rep}.log"), "w")
    proc = start(a, rundir, port, log)
    try:
        try:
            row["start_s"] = round(common.wait_healthy(base, proc, timeout=a.start_timeout), 2)
            tok = common.auth(base, "_superusers", SU_EMAIL, SU_PASS)
        except RuntimeError as e:
            row.update(status="failed", error=f"start: {e}")
            return row
        pr = probe(scn, mode, base, tok, plugins)
        row["probe"] = pr
        if not 200 <= pr["status"] < 300 or pr["loaded"] is None:
            row.update(status="failed", error=f"probe: {pr['note']}")
            return row
        env = dict(os.environ, BENCH_LUA_DIR=os.path.join(HERE, "lua"))
        res = bench.measure(a, script, base, path, proc, dict(env, BENCH_NONCE=f"w{rep}"),
                            dict(env, BENCH_NONCE=f"m{rep}"), row)
        if res is None:
            return row
        if scn == "create" and "slugger" in plugins:
            # every measured create went through the hook: the plugin's call count covers them
            st, raw = common.http("GET", base + "/api/plugins", token=tok, timeout=30)
            if st == 200:
                for p in json.loads(raw).get("plugins", []):
                    if p["name"] == "slugger":
                        row["hook_calls"], row["hook_failures"] = p.get("calls"), p.get("failures")
        if not pr["ok"] and row["status"] != "failed":
            row["status"] += "+probe_mismatch"
        return row
    finally:
        common.stop(proc)
        log.close()


def ratio_cell(base_rows, plug_rows):
    """Median over reps of (with plugins / without) req/s, each pair from the same repetition."""
    b = {r["rep"]: r["rps"] for r in base_rows if r.get("status") != "failed" and r.get("rps")}
    rs = [r["rps"] / b[r["rep"]] for r in plug_rows if r.get("status") != "failed" and r["rep"] in b]
    if not rs:
        return None, "–"
    m = bench.med(rs)
    cell = f"**{100 * m:.1f}%**"
    if len(rs) > 1:
        cell += f" ({100 * min(rs):.1f}–{100 * max(rs):.1f}%)"
    return m, cell


def render(rows, ctx, a, micro):
    st = ctx["static"]
    md = [f"## plugins: ferrobase with plugins vs without — {ctx['run_id']}", "",
          f"commit `{(st['git']['commit'] or '?')[:12]}`{' (dirty)' if st['git']['dirty'] else ''}; "
          f"{st['machine']['cpu_model']} ({st['machine']['cpus']} cpus); server on cpu {a.server_cpus or 'any'}, "
          f"wrk -t{a.threads} -c{a.conns} on cpu {a.wrk_cpus or 'any'}; {a.reps} rep(s) × {a.duration}s after "
          f"{a.warmup}s warm-up; modes interleaved per rep, each on a fresh copy of the same data dir "
          f"({POSTS} posts).", ""]
    if micro:
        md += [micro.strip(), ""]
    md += ["### HTTP", "",
           "| scenario | mode | req/s | with / without | goal | p50 / p95 / p99 ms | server CPU % | peak RSS MB | errors |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for scn, (_, path, modes, goal) in SCENARIOS.items():
        base_rows = [r for r in rows if r["scenario"] == scn and r["mode"] == modes[0][0]]
        for i, (mode, _) in enumerate(modes):
            rs = [r for r in rows if r["scenario"] == scn and r["mode"] == mode]
            if not rs:
                continue
            if i == 0:
                rc, gc = "100%", ""
            else:
                m, rc = ratio_cell(base_rows, rs)
                gc = f"≥ {100 * goal:.0f}% " + ("✅" if m is not None and m >= goal else "❌")
            cpu = bench.med([r.get("server_cpu_pct") for r in rs])
            md.append("| " + " | ".join([
                f"{scn} `{path.replace('/api/collections/posts/records', '…/records')}`", mode,
                bench.rps_cell(rs), rc, gc, bench.lat_cell(rs), bench.num(cpu),
                bench.rss_cell(rs), bench.err_cell(rs)]) + " |")
    others = [r["other_cpu_pct"] for r in rows if r.get("other_cpu_pct") is not None]
    md += ["", "req/s: successful responses per second, median (min–max) over reps; with / without: median "
           "(min–max) of per-rep ratios (the two runs of a rep are next to each other in time); ⚠ = errors, "
           "a probe mismatch, or fewer responses than connections."]
    if others:
        md.append(f"Other load on the box during measured runs: median {bench.med(others):.0f}%, max "
                  f"{max(others):.0f}% of one core (above ~10% the numbers are noisy).")
    return "\n".join(md) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 rep × 3 s after 1 s warm-up")
    ap.add_argument("--only", help="comma-separated: " + ",".join(SCENARIOS))
    ap.add_argument("--conns", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--req-timeout", type=int, default=5)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--wrk-cpus", default="1")
    ap.add_argument("--settle-max", type=int, default=60)
    ap.add_argument("--start-timeout", type=int, default=60)
    ap.add_argument("--micro", help="a file with the in-process plugin bench's output, put in the table")
    ap.add_argument("--root", default=os.path.dirname(HERE))
    ap.add_argument("--ferrobase")
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    if a.quick:
        a.duration, a.warmup, a.reps = 3, 1, 1
    a.root = os.path.abspath(a.root)
    a.work = os.path.abspath(a.work)
    a.ferrobase = os.path.abspath(a.ferrobase or os.path.join(a.root, "target", "release", "ferrobase"))
    scenarios = list(SCENARIOS) if not a.only else [s.strip() for s in a.only.split(",") if s.strip()]
    if any(s not in SCENARIOS for s in scenarios):
        ap.error(f"--only: pick from {', '.join(SCENARIOS)}")
    for tool in ["wrk"] + (["taskset"] if a.server_cpus or a.wrk_cpus else []):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found")
    if (os.cpu_count() or 1) < 2 and (a.server_cpus or a.wrk_cpus):
        a.server_cpus = a.wrk_cpus = ""
    if not os.access(a.ferrobase, os.X_OK):
        sys.exit(f"bench: ferrobase missing at {a.ferrobase} (bench/plugins.sh builds it)")
    needed = sorted({p for s in scenarios for _, ps in SCENARIOS[s][2] for p in ps})
    missing = [p for p in needed if not os.path.isfile(wasm_path(a.root, p))]
    if missing:
        sys.exit(f"bench: plugins not built: {missing}; run "
                 "cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml")

    run_id = time.strftime("%Y%m%dT%H%M%S")
    a.logdir = os.path.join(a.work, "logs", "plugins-" + run_id)
    os.makedirs(a.logdir, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    ctx = {"run_id": run_id, "static": {
        "git": bench.git_info(a.root), "machine": bench.machine_info(),
        "params": {"duration_s": a.duration, "warmup_s": a.warmup, "reps": a.reps, "conns": a.conns,
                   "threads": a.threads, "req_timeout_s": a.req_timeout, "server_cpus": a.server_cpus,
                   "wrk_cpus": a.wrk_cpus}}}
    t0 = time.time()
    ctx["template"] = make_template(a)
    bench.log(f"template ready in {time.time() - t0:.1f}s")
    micro, micro_json = None, None
    if a.micro and os.path.isfile(a.micro):
        text = open(a.micro).read()
        m = re.search(r"^PLUGINS_BENCH_JSON (.*)$", text, re.M)
        micro_json = json.loads(m.group(1)) if m else None
        micro = "\n".join(l for l in text.splitlines() if not l.startswith("PLUGINS_BENCH_JSON"))
        micro = micro.replace("\n## ", "\n### ").replace("## ", "### ", 1) if micro.startswith("## ") else micro

    plan = [(s, mode, ps, rep) for s in scenarios for rep in range(a.reps) for mode, ps in SCENARIOS[s][2]]
    est = len(plan) * (a.duration + a.warmup + 4)
    bench.log(f"{len(plan)} runs, about {est // 60} min {est % 60} s; logs in {os.path.relpath(a.logdir)}")
    rows = []
    out_jsonl = os.path.join(a.results, "plugins.jsonl")
    if micro_json:
        with open(out_jsonl, "a") as f:
            f.write(json.dumps({"ts": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                "run_id": run_id, "bench": "plugins-inprocess", **micro_json, **ctx["static"]}) + "\n")
    for i, (scn, mode, ps, rep) in enumerate(plan, 1):
        row = run_one(a, scn, mode, ps, rep, ctx)
        rows.append(row)
        with open(out_jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        note = row.get("error") or (row.get("probe") or {}).get("note")
        bench.log(f"{i}/{len(plan)} {scn:<7} {mode:<24} rep {rep}: {row.get('status'):<8} "
                  f"{bench.num(row.get('rps'))} req/s p99 {bench.lat(row.get('lat_p99_ms'))} ms "
                  f"other {row.get('other_cpu_pct')}%" + (f"  ({note})" if note else ""))
    md = render(rows, ctx, a, micro)
    open(os.path.join(a.results, "plugins-latest.md"), "w").write(md)
    open(os.path.join(a.results, f"plugins-{run_id}.md"), "w").write(md)
    print(md)
    bench.log(f"wrote {os.path.relpath(os.path.join(a.results, 'plugins-latest.md'))}, appended "
              f"{len(rows)} lines to {os.path.relpath(out_jsonl)}")


if __name__ == "__main__":
    main()
