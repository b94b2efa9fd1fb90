//! The response and token caches never answer with data older than a write the client has seen
//! complete: writers check their own writes through list and view while readers keep the same
//! responses hot in the cache. The store's carried-over table counts are checked the same way.

use crate::common::Server;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const WRITERS: usize = 3;
const ROUNDS: usize = 60;
/// A filter over the row itself that every row passes.
const KEEP_ALL: &str = "&filter=tag!%3D%27none%27";

#[test]
fn reads_after_writes_are_never_stale_under_concurrency() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "counters", "listRule": "", "viewRule": "", "createRule": "",
            "updateRule": "", "deleteRule": "",
            "fields": [{"name": "n", "type": "number"}, {"name": "tag", "type": "text"}]}),
    );
    let base = "/api/collections/counters/records";
    let ids: Vec<String> = (0..WRITERS)
        .map(|w| {
            let r = s.req(
                "POST",
                base,
                None,
                Some(&json!({"n": 0, "tag": format!("w{w}")})),
            );
            assert_eq!(r.status, 200, "{}", r.json);
            r.json["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let stop = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);

    std::thread::scope(|scope| {
        // Readers: the very queries the writers check, plus a list, as fast as they can, so
        // the cache is always holding the previous answer when a write lands.
        for r in 0..3 {
            let (s, ids, stop, reads) = (&s, &ids, &stop, &reads);
            scope.spawn(move || {
                let mut i = r;
                let deadline = std::time::Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                    let id = &ids[i % ids.len()];
                    let paths = [
                        format!("{base}/{id}"),
                        format!("{base}?filter=id%3D%27{id}%27"),
                        format!("{base}?filter=tag%3D%27fresh{}%27", i % WRITERS),
                        format!("{base}?sort=-n&perPage=5"),
                        format!("{base}?perPage=500"),
                        format!("{base}?perPage=500&sort=-n"),
                        format!("{base}?perPage=500{KEEP_ALL}"),
                        format!("{base}?perPage=500&sort=-n{KEEP_ALL}"),
                    ];
                    for p in &paths {
                        let res = s.req("GET", p, None, None);
                        assert!(res.status == 200 || res.status == 404, "{p}: {}", res.json);
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            });
        }
        // Writers: every write is followed at once by reads that must see it.
        let mut handles = Vec::new();
        for (w, id) in ids.iter().enumerate() {
            let s = &s;
            handles.push(scope.spawn(move || {
                let view = format!("{base}/{id}");
                let by_id = format!("{base}?filter=id%3D%27{id}%27");
                let fresh = format!("{base}?filter=tag%3D%27fresh{w}%27");
                // The whole table, unsorted and sorted by `n`, and the same through a filter
                // that keeps every row: its total and the sort's first rows are carried over
                // inserts by the store; they must agree with the page of the same answer, and
                // show this writer's own last update.
                let all = |has: &str, present: bool, mine: u64, what: &str| {
                    for sort in ["", "&sort=-n", KEEP_ALL, &format!("&sort=-n{KEEP_ALL}")] {
                        let r = s.req("GET", &format!("{base}?perPage=500{sort}"), None, None);
                        let items = r.json["items"].as_array().expect("items");
                        assert_eq!(
                            r.json["totalItems"],
                            json!(items.len()),
                            "{what}: {}",
                            r.json
                        );
                        assert_eq!(
                            items.iter().any(|i| i["id"] == has),
                            present,
                            "{what}{sort}: {}",
                            r.json
                        );
                        let own = items.iter().find(|i| i["id"] == id.as_str());
                        assert_eq!(own.map(|i| &i["n"]), Some(&json!(mine)), "{what}{sort}");
                        if sort.contains("sort") {
                            let n: Vec<u64> =
                                items.iter().map(|i| i["n"].as_u64().unwrap_or(0)).collect();
                            assert!(n.windows(2).all(|w| w[0] >= w[1]), "{what}{sort}: {n:?}");
                        }
                    }
                };
                for round in 1..=ROUNDS {
                    let n = round as u64;
                    let r = s.req("PATCH", &view, None, Some(&json!({"n": n})));
                    assert_eq!(r.status, 200, "{}", r.json);
                    assert_eq!(
                        s.req("GET", &view, None, None).json["n"],
                        json!(n),
                        "view after update"
                    );
                    assert_eq!(
                        s.req("GET", &by_id, None, None).json["items"][0]["n"],
                        json!(n),
                        "list after update"
                    );
                    let created = s.req(
                        "POST",
                        base,
                        None,
                        Some(&json!({"tag": format!("fresh{w}")})),
                    );
                    assert_eq!(created.status, 200, "{}", created.json);
                    let new_id = created.json["id"].as_str().unwrap().to_owned();
                    all(&new_id, true, n, "whole list after create");
                    assert_eq!(
                        s.req("GET", &fresh, None, None).json["totalItems"],
                        json!(1),
                        "list after create"
                    );
                    let gone = s.req("DELETE", &format!("{base}/{new_id}"), None, None);
                    assert_eq!(gone.status, 204);
                    all(&new_id, false, n, "whole list after delete");
                    assert_eq!(
                        s.req("GET", &fresh, None, None).json["totalItems"],
                        json!(0),
                        "list after delete"
                    );
                    assert_eq!(
                        s.req("GET", &format!("{base}/{new_id}"), None, None).status,
                        404,
                        "view after delete"
                    );
                }
            }));
        }
        let outcomes: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        // Stop the readers before reporting, or a failed writer would leave them running.
        stop.store(true, Ordering::Relaxed);
        for o in outcomes {
            if let Err(panic) = o {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert!(reads.load(Ordering::Relaxed) > 100, "the readers ran");
}

/// A changed collection rule applies to the next request, cached answers notwithstanding, and a
/// token stops working the moment its record's tokenKey changes (password change).
#[test]
fn rule_changes_and_password_changes_are_seen_at_once() {
    let s = Server::start();
    let su = s.su_token();
    let coll = s.create_collection(
        &su,
        json!({"name": "notes", "listRule": "", "viewRule": "",
            "fields": [{"name": "t", "type": "text"}]}),
    );
    let created = s.req(
        "POST",
        "/api/collections/notes/records",
        Some(&su),
        Some(&json!({"t": "x"})),
    );
    let path = format!(
        "/api/collections/notes/records/{}",
        created.json["id"].as_str().unwrap()
    );
    for _ in 0..3 {
        assert_eq!(s.req("GET", &path, None, None).status, 200);
        assert_eq!(
            s.req("GET", "/api/collections/notes/records", None, None)
                .json["totalItems"],
            json!(1)
        );
    }
    let r = s.req(
        "PATCH",
        &format!("/api/collections/{}", coll["id"].as_str().unwrap()),
        Some(&su),
        Some(&json!({"listRule": "t = 'y'", "viewRule": null})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(s.req("GET", &path, None, None).status, 403);
    assert_eq!(
        s.req("GET", "/api/collections/notes/records", None, None)
            .json["totalItems"],
        json!(0)
    );

    // A user token, used until cached, then invalidated by a password change.
    let u = s.req(
        "POST",
        "/api/collections/users/records",
        None,
        Some(&json!({"email": "u@example.com", "password": "pass123456", "passwordConfirm": "pass123456"})),
    );
    assert_eq!(u.status, 200, "{}", u.json);
    let uid = u.json["id"].as_str().unwrap().to_owned();
    let tok = s.login("users", "u@example.com", "pass123456").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let me = format!("/api/collections/users/records/{uid}");
    for _ in 0..3 {
        assert_eq!(s.req("GET", &me, Some(&tok), None).status, 200);
    }
    let r = s.req(
        "PATCH",
        &me,
        Some(&tok),
        Some(&json!({"oldPassword": "pass123456", "password": "newpass1234", "passwordConfirm": "newpass1234"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        s.req("GET", &me, Some(&tok), None).status,
        404,
        "the old token is a guest now, and guests may not view users"
    );
}

#[test]
fn a_view_collection_is_never_served_stale_after_a_write_to_the_table_it_reads() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "items", "listRule": "", "viewRule": "", "createRule": "",
            "deleteRule": "", "fields": [{"name": "tag", "type": "text"}]}),
    );
    s.create_collection(
        &su,
        json!({"name": "tags", "type": "view", "listRule": "", "viewRule": "",
            "viewQuery": "SELECT items.id, items.tag FROM items"}),
    );
    let r = s.req(
        "POST",
        "/api/collections/items/records",
        None,
        Some(&json!({"tag": "a"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_owned();
    let list = "/api/collections/tags/records";
    let one = format!("{list}/{id}");
    // Read twice: the second answer is the one a cache would keep.
    for _ in 0..2 {
        assert_eq!(s.req("GET", list, None, None).json["totalItems"], 1);
        assert_eq!(s.req("GET", &one, None, None).status, 200);
    }
    let r = s.req(
        "DELETE",
        &format!("/api/collections/items/records/{id}"),
        None,
        None,
    );
    assert_eq!(r.status, 204, "{}", r.json);
    assert_eq!(s.req("GET", list, None, None).json["totalItems"], 0);
    assert_eq!(s.req("GET", &one, None, None).status, 404);
}

/// The responses served from the cache so far, from the server's own metrics.
fn response_hits(s: &Server, su: &str) -> u64 {
    s.metric(su, "ferrobase_cache_hits_total{cache=\"responses\"}")
}

/// A view is kept while other rows of its table are written, and dropped as soon as its own row
/// is updated, deleted, or deleted and made again under the same id; a view whose rule reads
/// other rows of the same table is dropped by any write to it.
#[test]
fn a_view_is_kept_until_its_own_row_changes() {
    let s = Server::start_process();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "items", "listRule": "", "viewRule": "", "createRule": "",
            "updateRule": "", "deleteRule": "",
            "fields": [{"name": "n", "type": "number"}, {"name": "tag", "type": "text"}]}),
    );
    let base = "/api/collections/items/records";
    let make = |id: &str, n: u64, tag: &str| {
        let r = s.req(
            "POST",
            base,
            None,
            Some(&json!({"id": id, "n": n, "tag": tag})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    };
    make("aaaaaaaaaaaaaaa", 1, "open");
    make("bbbbbbbbbbbbbbb", 1, "x");
    let view_a = format!("{base}/aaaaaaaaaaaaaaa");
    let view_b = format!("{base}/bbbbbbbbbbbbbbb");
    let get = |p: &str| s.req("GET", p, None, None);
    assert_eq!(get(&view_a).json["n"], json!(1));

    // Other rows written: an update, a create, a delete. The view of A is still served from
    // the cache, and right.
    for round in 2..5u64 {
        let r = s.req("PATCH", &view_b, None, Some(&json!({"n": round})));
        assert_eq!(r.status, 200, "{}", r.json);
        make(&format!("ccccccccccccc{round:02}"), round, "y");
        let r = s.req(
            "DELETE",
            &format!("{base}/ccccccccccccc{round:02}"),
            None,
            None,
        );
        assert_eq!(r.status, 204);
        let before = response_hits(&s, &su);
        assert_eq!(get(&view_a).json["n"], json!(1));
        assert_eq!(
            response_hits(&s, &su),
            before + 1,
            "round {round}: the view of A was not served from the cache"
        );
        assert_eq!(
            get(&view_b).json["n"],
            json!(round),
            "B's own update is seen"
        );
    }

    // Its own row updated: seen at once.
    let r = s.req("PATCH", &view_a, None, Some(&json!({"n": 7})));
    assert_eq!(r.status, 200);
    assert_eq!(get(&view_a).json["n"], json!(7));
    // Deleted, then made again under the same id: the new one is seen.
    assert_eq!(get(&view_a).json["n"], json!(7));
    assert_eq!(s.req("DELETE", &view_a, None, None).status, 204);
    assert_eq!(get(&view_a).status, 404);
    make("aaaaaaaaaaaaaaa", 9, "open");
    assert_eq!(get(&view_a).json["n"], json!(9));

    // A rule reading the table's other rows: B may be viewed while some item is "open".
    let r = s.req(
        "PATCH",
        "/api/collections/items",
        Some(&su),
        Some(&json!({"viewRule": "@collection.items.tag ?= 'open'"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(get(&view_b).status, 200);
    assert_eq!(get(&view_b).status, 200);
    let r = s.req("PATCH", &view_a, None, Some(&json!({"tag": "closed"})));
    assert_eq!(r.status, 200);
    assert_eq!(
        get(&view_b).status,
        404,
        "A's update changed whether B may be viewed"
    );
}

/// A field may be named `rowid` or `oid` (PocketBase reserves only `_rowid_`): SQLite then
/// reads those names as the columns, so the rows' own ids must be reached as `_rowid_`. Lists
/// and views answer, and a view cached by its row sees that row's change.
#[test]
fn fields_named_rowid_and_oid_are_plain_columns() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "odd", "listRule": "", "viewRule": "", "createRule": "", "updateRule": "",
            "fields": [{"name": "rowid", "type": "select", "values": ["a", "b"], "maxSelect": 2},
                       {"name": "oid", "type": "text"}]}),
    );
    let base = "/api/collections/odd/records";
    let r = s.req(
        "POST",
        base,
        None,
        Some(&json!({"id": "oddrecord000001", "rowid": ["a"], "oid": "x"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let view = format!("{base}/oddrecord000001");
    for _ in 0..2 {
        let v = s.req("GET", &view, None, None);
        assert_eq!(v.status, 200, "{}", v.json);
        assert_eq!(
            (&v.json["rowid"], &v.json["oid"]),
            (&json!(["a"]), &json!("x"))
        );
        let l = s.req("GET", base, None, None);
        assert_eq!(l.status, 200, "{}", l.json);
        assert_eq!(l.json["items"][0]["rowid"], json!(["a"]));
    }
    let r = s.req(
        "PATCH",
        &view,
        None,
        Some(&json!({"rowid": ["b"], "oid": "y"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let v = s.req("GET", &view, None, None);
    assert_eq!(
        (&v.json["rowid"], &v.json["oid"]),
        (&json!(["b"]), &json!("y"))
    );
}
