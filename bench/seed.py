#!/usr/bin/env python3
"""Build one seeded data-dir template for bench/ with the reference PocketBase binary.

Everything in the template is written by PocketBase itself (collections through the collections
API, records through the batch API), so its on-disk format is exactly PocketBase's. The count of
every collection is verified over REST before PocketBase is stopped (stopping checkpoints the WAL).

Contents (see README.md):
  users          the default auth collection, --users records (user<i>@bench.test / USER_PASSWORD)
  posts          public (list/view/create rules ""): title, ~500-char body, published, views 0..999,
                 owner -> users (single relation), created/updated autodates; --posts records
  private_posts  same fields, listRule = viewRule = "owner = @request.auth.id"; --private records,
                 owner assigned round-robin over the users

Larger sets are derived from a built template by SQL on a copy (`--scale-from`, see scale()), and an
index can be declared on posts by the reference through the collections API (`--index-from`, see
with_indexes()); bench.py does both for its 1m and 1m_idx templates.

Output directory (wiped first):
  pb_data/            the template (copied fresh for every server run)
  ids.txt             up to 1000 random posts ids (the view scenario cycles through them)
  users.json          [{id, email, private_count}] (tokens are fetched per run from the server under test)
  resp_list.json      body of GET /api/collections/posts/records (the ceiling server replays it)
  setup.json          facts: versions, counts, seeding time, sizes, the parameters (the cache key)

Stdlib only; talks to 127.0.0.1 only.
"""
import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SEED_FORMAT = 1  # bump when the template's contents change; invalidates cached templates

SUPERUSER_EMAIL = "bench@bench.test"
SUPERUSER_PASSWORD = "benchpass123456"
USER_PASSWORD = "userpass123456"


def make_body(rng, size=500):
    out, n = [], 0
    while n < size:
        w = rng.choice(common.WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def make_record(rng, i, owner):
    return {
        "title": f"Post {i}: {rng.choice(common.WORDS)} {rng.choice(common.WORDS)}",
        "body": make_body(rng),
        "published": rng.random() < 0.5,
        "views": rng.randrange(0, 1000),
        "owner": owner,
    }


def post_fields(users_collection_id):
    return [
        {"name": "title", "type": "text"},
        {"name": "body", "type": "text"},
        {"name": "published", "type": "bool"},
        {"name": "views", "type": "number"},
        {"name": "owner", "type": "relation", "collectionId": users_collection_id, "maxSelect": 1,
         "cascadeDelete": False},
        {"name": "created", "type": "autodate", "onCreate": True, "onUpdate": False},
        {"name": "updated", "type": "autodate", "onCreate": True, "onUpdate": True},
    ]


def batch_create(base, token, collection, records, batch, workers):
    """Create records through /api/batch, `workers` batches in flight. Returns the created ids in order."""
    chunks = [(i, records[i:i + batch]) for i in range(0, len(records), batch)]
    ids = [None] * len(records)
    lock = threading.Lock()
    errors = []
    pos = [0]

    def worker():
        while True:
            with lock:
                if pos[0] >= len(chunks) or errors:
                    return
                start, chunk = chunks[pos[0]]
                pos[0] += 1
            reqs = [{"method": "POST", "url": f"/api/collections/{collection}/records", "body": r} for r in chunk]
            st, raw = common.http("POST", base + "/api/batch", {"requests": reqs}, token, timeout=300)
            if st != 200:
                with lock:
                    errors.append((st, raw[:500]))
                return
            for k, res in enumerate(json.loads(raw)):
                ids[start + k] = res["body"]["id"]

    ths = [threading.Thread(target=worker) for _ in range(workers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errors:
        raise SystemExit(f"seeding {collection} failed: {errors[0]}")
    return ids


def total_items(base, collection, token=None):
    st, raw = common.http("GET", base + f"/api/collections/{collection}/records?perPage=1", token=token)
    if st != 200:
        raise SystemExit(f"count of {collection}: HTTP {st} {raw[:300]!r}")
    return json.loads(raw)["totalItems"]


def params_of(a, pb_version):
    return {"seed_format": SEED_FORMAT, "pocketbase": pb_version, "posts": a.posts, "private": a.private,
            "users": a.users, "seed": a.seed, "pb_logs": a.pb_logs}


def is_current(out, wanted):
    """True when `out` already holds a complete template built with the same parameters."""
    try:
        facts = json.load(open(os.path.join(out, "setup.json")))
    except (OSError, ValueError):
        return False
    return facts.get("params") == wanted and os.path.exists(os.path.join(out, "pb_data", "data.db"))


def build(a):
    pb_version = subprocess.run([a.pb, "--version"], capture_output=True, text=True).stdout.strip()
    out = os.path.abspath(a.out)
    wanted = params_of(a, pb_version)
    if not a.force and is_current(out, wanted):
        print(f"seed: reusing {os.path.relpath(out)} ({a.posts} posts)", file=sys.stderr)
        return json.load(open(os.path.join(out, "setup.json")))

    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    data = os.path.join(out, "pb_data")
    facts = {"params": wanted}
    t_all = time.time()

    # cwd = the template dir and a relative --dir: no absolute path ends up in logs or files
    subprocess.run([a.pb, "superuser", "upsert", SUPERUSER_EMAIL, SUPERUSER_PASSWORD, "--dir", "pb_data"],
                   check=True, capture_output=True, cwd=out)
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(out, "seed-pocketbase.log"), "w")
    # --automigrate=false: no pb_migrations/*.js files for the collections created below
    proc = subprocess.Popen([a.pb, "serve", "--http", f"127.0.0.1:{port}", "--dir", "pb_data", "--automigrate=false"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=out)
    try:
        common.wait_healthy(base, proc, timeout=60)
        token = common.auth(base, "_superusers", SUPERUSER_EMAIL, SUPERUSER_PASSWORD)

        settings = {"batch": {"enabled": True, "maxRequests": max(a.batch, 50), "timeout": 300,
                              "maxBodySize": 512 << 20}}
        if not a.pb_logs:
            # Request logs off (PocketBase writes one row per request to auxiliary.db by default;
            # ferrobase keeps no request log). --pb-logs keeps PocketBase's default.
            settings["logs"] = {"maxDays": 0}
        st, raw = common.http("PATCH", base + "/api/settings", settings, token)
        if st != 200:
            raise SystemExit(f"settings: HTTP {st} {raw[:300]!r}")

        st, raw = common.http("GET", base + "/api/collections/users", token=token)
        if st != 200:
            raise SystemExit(f"users collection: HTTP {st} {raw[:300]!r}")
        users_cid = json.loads(raw)["id"]

        for name, rule in (("posts", ""), ("private_posts", "owner = @request.auth.id")):
            coll = {"name": name, "type": "base", "listRule": rule, "viewRule": rule,
                    "createRule": "" if name == "posts" else None, "updateRule": None, "deleteRule": None,
                    "fields": post_fields(users_cid)}
            st, raw = common.http("POST", base + "/api/collections", coll, token)
            if st != 200:
                raise SystemExit(f"create collection {name}: HTTP {st} {raw[:300]!r}")

        rng = random.Random(a.seed)
        t0 = time.time()
        users = [{"email": f"user{i}@bench.test", "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD,
                  "name": f"User {i}", "emailVisibility": False, "verified": True} for i in range(a.users)]
        user_ids = batch_create(base, token, "users", users, 10, 2)
        facts["users_seconds"] = round(time.time() - t0, 2)

        t0 = time.time()
        posts = [make_record(rng, i, rng.choice(user_ids)) for i in range(a.posts)]
        batch_create(base, token, "posts", posts, a.batch, a.workers)
        facts["posts_seconds"] = round(time.time() - t0, 2)
        facts["posts_per_s"] = round(a.posts / max(facts["posts_seconds"], 1e-9))

        private = [make_record(rng, i, user_ids[i % len(user_ids)]) for i in range(a.private)]
        batch_create(base, token, "private_posts", private, a.batch, a.workers)
        counts = {}
        for r in private:
            counts[r["owner"]] = counts.get(r["owner"], 0) + 1

        # verify over REST
        for coll, want in (("users", a.users), ("posts", a.posts), ("private_posts", a.private)):
            got = total_items(base, coll, token)
            if got != want:
                raise SystemExit(f"verify: {coll} has {got} records over REST, expected {want}")
            facts[f"verified_{coll}"] = got

        st, raw = common.http("GET", base + "/api/collections/posts/records")
        if st != 200:
            raise SystemExit(f"capture list: HTTP {st}")
        open(os.path.join(out, "resp_list.json"), "wb").write(raw)
        facts["resp_list_bytes"] = len(raw)

        json.dump([{"id": uid, "email": u["email"], "private_count": counts.get(uid, 0)}
                   for uid, u in zip(user_ids, users)], open(os.path.join(out, "users.json"), "w"), indent=1)
    finally:
        common.stop(proc)
        log.close()

    con = sqlite3.connect(f"file:{data}/data.db?mode=ro", uri=True)
    ids = [r[0] for r in con.execute("SELECT id FROM posts ORDER BY random() LIMIT 1000")]
    con.close()
    open(os.path.join(out, "ids.txt"), "w").write("".join(i + "\n" for i in ids))
    facts["data_dir_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    facts["seed_total_seconds"] = round(time.time() - t_all, 2)
    facts["user_password"] = USER_PASSWORD
    json.dump(facts, open(os.path.join(out, "setup.json"), "w"), indent=1)
    print(f"seed: built {os.path.relpath(out)}: {json.dumps({k: v for k, v in facts.items() if k != 'params'})}", file=sys.stderr)
    return facts


# ---------------------------------------------------------------- larger datasets, derived by SQL

DERIVE_FORMAT = 1  # bump when scale() or with_indexes() change what they write
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
CREATED_BASE_MS = 1_735_689_600_000  # 2025-01-01 00:00:00.000Z: the derived rows' first `created`


def pb_datetime(ms):
    """PocketBase's stored datetime format: `YYYY-MM-DD HH:MM:SS.mmmZ` (UTC)."""
    t = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f".{ms % 1000:03d}Z"


def _reference_check(pb, out, posts, indexes=None, timeout=600):
    """Start the reference on out/pb_data; if `indexes` is given, set the posts collection's
    `indexes` through the collections API (PocketBase creates them); check posts' totalItems over
    REST; capture the default list's body. Stopping it checkpoints the WAL. Returns facts."""
    facts = {}
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(out, "seed-pocketbase.log"), "a")
    proc = subprocess.Popen([pb, "serve", "--http", f"127.0.0.1:{port}", "--dir", "pb_data", "--automigrate=false"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=out)
    try:
        facts["reference_start_s"] = round(common.wait_healthy(base, proc, timeout=120), 2)
        token = common.auth(base, "_superusers", SUPERUSER_EMAIL, SUPERUSER_PASSWORD)
        if indexes is not None:
            t0 = time.time()
            st, raw = common.http("PATCH", base + "/api/collections/posts", {"indexes": indexes}, token,
                                  timeout=timeout)
            if st != 200:
                raise SystemExit(f"indexes: HTTP {st} {raw[:300]!r}")
            got = json.loads(raw).get("indexes")
            if got != indexes:
                raise SystemExit(f"indexes: the collection has {got}, expected {indexes}")
            facts["index_seconds"] = round(time.time() - t0, 2)
        t0 = time.time()
        st, raw = common.http("GET", base + "/api/collections/posts/records?perPage=1", token=token, timeout=timeout)
        if st != 200:
            raise SystemExit(f"count of posts: HTTP {st} {raw[:300]!r}")
        got = json.loads(raw)["totalItems"]
        if got != posts:
            raise SystemExit(f"verify: posts has {got} records over REST, expected {posts}")
        facts["verified_posts"] = got
        facts["reference_count_s"] = round(time.time() - t0, 2)
        st, raw = common.http("GET", base + "/api/collections/posts/records", timeout=timeout)
        if st != 200:
            raise SystemExit(f"capture list: HTTP {st}")
        open(os.path.join(out, "resp_list.json"), "wb").write(raw)
        facts["resp_list_bytes"] = len(raw)
    finally:
        common.stop(proc, grace=60)
        log.close()
    return facts


def _finish(out, facts, t_all, n_ids):
    data = os.path.join(out, "pb_data")
    con = sqlite3.connect(f"file:{data}/data.db?mode=ro", uri=True)
    rng = random.Random(facts["params"].get("seed", 42))
    n = con.execute("SELECT max(rowid) FROM posts").fetchone()[0]
    ids = []
    for rowid in rng.sample(range(1, n + 1), min(n_ids * 2, n)):
        row = con.execute("SELECT id FROM posts WHERE rowid = ?", (rowid,)).fetchone()
        if row:
            ids.append(row[0])
        if len(ids) == n_ids:
            break
    con.close()
    open(os.path.join(out, "ids.txt"), "w").write("".join(i + "\n" for i in ids))
    facts["data_dir_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    facts["seed_total_seconds"] = round(time.time() - t_all, 2)
    facts["user_password"] = USER_PASSWORD
    json.dump(facts, open(os.path.join(out, "setup.json"), "w"), indent=1)
    print(f"seed: built {os.path.relpath(out)}: {json.dumps({k: v for k, v in facts.items() if k != 'params'})}",
          file=sys.stderr)
    return facts


def scale(pb, src, out, posts, seed=42, force=False):
    """A template with `posts` posts, derived from the template in `src` (built by build()) by SQL on a
    copy: its posts are kept, and new rows are added with new 15-character ids ([a-z0-9], like
    PocketBase's), the source rows' bodies, new titles ("Post i: word word"), random `views`,
    `published` and owners (the same 50 users); then every post gets a distinct `created` (strictly
    increasing with the rowid, 1-2,000 ms apart from 2025-01-01) and `updated` (`created` plus 0 to
    the gap - 1 ms), in PocketBase's format. VACUUM, then the reference opens it, checks the count
    over REST and is stopped (which checkpoints the WAL). Cached like build()'s templates."""
    pb_version = subprocess.run([pb, "--version"], capture_output=True, text=True).stdout.strip()
    src_facts = json.load(open(os.path.join(src, "setup.json")))
    out = os.path.abspath(out)
    wanted = {"derive_format": DERIVE_FORMAT, "pocketbase": pb_version, "from": src_facts["params"],
              "posts": posts, "seed": seed}
    if not force and is_current(out, wanted):
        print(f"seed: reusing {os.path.relpath(out)} ({posts} posts)", file=sys.stderr)
        return json.load(open(os.path.join(out, "setup.json")))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    t_all = time.time()
    facts = {"params": wanted}
    shutil.copytree(os.path.join(src, "pb_data"), os.path.join(out, "pb_data"))
    shutil.copy(os.path.join(src, "users.json"), os.path.join(out, "users.json"))
    user_ids = [u["id"] for u in json.load(open(os.path.join(out, "users.json")))]

    t0 = time.time()
    con = sqlite3.connect(os.path.join(out, "pb_data", "data.db"), isolation_level=None)
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -400000")  # 400 MB: the id index takes random inserts
    have = con.execute("SELECT count(*) FROM posts").fetchone()[0]
    if have > posts:
        raise SystemExit(f"scale: the source has {have} posts, more than {posts}")
    bodies = [r[0] for r in con.execute("SELECT body FROM posts ORDER BY rowid")]
    taken = {r[0] for r in con.execute("SELECT id FROM posts")}
    rng = random.Random(seed)

    def new_id():
        while True:
            i = "".join(rng.choices(ID_ALPHABET, k=15))
            if i not in taken:
                taken.add(i)
                return i

    def rows():
        for i in range(have, posts):
            w = rng.choices(common.WORDS, k=2)
            yield (new_id(), f"Post {i}: {w[0]} {w[1]}", bodies[i % len(bodies)], int(rng.random() < 0.5),
                   rng.randrange(0, 1000), rng.choice(user_ids))

    con.execute("BEGIN")
    con.executemany("INSERT INTO posts (id, title, body, published, views, owner) VALUES (?, ?, ?, ?, ?, ?)", rows())
    facts["insert_seconds"] = round(time.time() - t0, 2)

    t0 = time.time()
    ms = CREATED_BASE_MS

    def stamps():
        nonlocal ms
        for (rowid,) in con.execute("SELECT rowid FROM posts ORDER BY rowid").fetchall():
            gap = rng.randint(1, 2000)
            ms += gap
            yield pb_datetime(ms), pb_datetime(ms + rng.randrange(0, gap)), rowid

    con.executemany("UPDATE posts SET created = ?, updated = ? WHERE rowid = ?", stamps())
    con.execute("COMMIT")
    facts["timestamps_seconds"] = round(time.time() - t0, 2)
    n, distinct = con.execute("SELECT count(*), count(DISTINCT created) FROM posts").fetchone()
    if n != posts or distinct != posts:
        raise SystemExit(f"scale: {n} posts with {distinct} distinct `created`, expected {posts}")
    t0 = time.time()
    con.execute("VACUUM")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    facts["vacuum_seconds"] = round(time.time() - t0, 2)

    t0 = time.time()
    facts.update(_reference_check(pb, out, posts))
    facts["reference_seconds"] = round(time.time() - t0, 2)
    return _finish(out, facts, t_all, 1000)


def with_indexes(pb, src, out, indexes, force=False):
    """A copy of the template in `src` whose posts collection declares `indexes` (PocketBase's
    `indexes` syntax), set by the reference through the collections API, so the index and the
    collection's metadata are exactly as PocketBase writes them."""
    pb_version = subprocess.run([pb, "--version"], capture_output=True, text=True).stdout.strip()
    src_facts = json.load(open(os.path.join(src, "setup.json")))
    out = os.path.abspath(out)
    wanted = {"derive_format": DERIVE_FORMAT, "pocketbase": pb_version, "from": src_facts["params"],
              "indexes": indexes}
    if not force and is_current(out, wanted):
        print(f"seed: reusing {os.path.relpath(out)} (indexes {indexes})", file=sys.stderr)
        return json.load(open(os.path.join(out, "setup.json")))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    t_all = time.time()
    facts = {"params": wanted}
    shutil.copytree(os.path.join(src, "pb_data"), os.path.join(out, "pb_data"))
    for f in ("users.json", "ids.txt"):
        shutil.copy(os.path.join(src, f), os.path.join(out, f))
    posts = src_facts["verified_posts"]
    facts.update(_reference_check(pb, out, posts, indexes))
    con = sqlite3.connect(f"file:{out}/pb_data/data.db?mode=ro", uri=True)
    facts["sqlite_indexes"] = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'posts' AND sql IS NOT NULL")]
    con.close()
    facts["data_dir_bytes"] = sum(os.path.getsize(os.path.join(d, f))
                                  for d, _, fs in os.walk(os.path.join(out, "pb_data")) for f in fs)
    facts["seed_total_seconds"] = round(time.time() - t_all, 2)
    facts["user_password"] = USER_PASSWORD
    json.dump(facts, open(os.path.join(out, "setup.json"), "w"), indent=1)
    print(f"seed: built {os.path.relpath(out)}: {json.dumps({k: v for k, v in facts.items() if k != 'params'})}",
          file=sys.stderr)
    return facts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pb", required=True, help="the reference pocketbase binary")
    ap.add_argument("--out", required=True, help="template directory (wiped when rebuilt)")
    ap.add_argument("--posts", type=int, default=1000)
    ap.add_argument("--private", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--batch", type=int, default=500, help="records per batch request")
    ap.add_argument("--workers", type=int, default=2, help="batch requests in flight")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--pb-logs", action="store_true", help="keep PocketBase's request log on")
    ap.add_argument("--force", action="store_true", help="rebuild even when a matching template exists")
    ap.add_argument("--scale-from", metavar="TEMPLATE",
                    help="derive --out from this template by SQL up to --posts posts (scale()), instead of seeding")
    ap.add_argument("--index-from", metavar="TEMPLATE",
                    help="copy this template and have the reference declare --index on posts (with_indexes())")
    ap.add_argument("--index", action="append", default=[],
                    help="an index in PocketBase's `indexes` syntax, for --index-from (repeatable)")
    a = ap.parse_args()
    a.pb = os.path.abspath(a.pb)  # the reference runs with the template dir as its cwd
    if a.scale_from:
        scale(a.pb, a.scale_from, a.out, a.posts, a.seed, a.force)
    elif a.index_from:
        if not a.index:
            ap.error("--index-from needs at least one --index")
        with_indexes(a.pb, a.index_from, a.out, a.index, a.force)
    else:
        build(a)


if __name__ == "__main__":
    main()
