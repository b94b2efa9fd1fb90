//! Listing and viewing: generated `page`, `perPage`, `skipTotal`, `sort`, `fields` (with
//! `:excerpt`) and simple filters over a fixed collection, sent to both servers; statuses, error
//! bodies, the paging numbers and the items (their ids and fields, in order) compared. Views of
//! one record (present or not) with generated `fields` too.
//!
//! `DIFF_LIST_CASES` sets the number of list requests (default 400 times `DIFF_SCALE`; half as
//! many views).

use super::{Pair, Rng, cases, none_differ, seed, start_pair};
use crate::common::enc;
use serde_json::{Value, json};

const PAGES: &[&str] = &[
    "",
    "1",
    "2",
    "3",
    "0",
    "-1",
    "7",
    "999",
    "x",
    "1.5",
    "01",
    " 2",
    "2 ",
    "+2",
    "-0",
    "0x2",
    "9999999999999999999",
    "\t1",
];
const PER_PAGES: &[&str] = &[
    "", "1", "7", "30", "0", "-5", "500", "1000", "1001", "5000", "abc", "2.5", "007", " 7", "+7",
    "1e1",
];
const SKIP_TOTALS: &[&str] = &["", "1", "true", "0", "false", "x", "TRUE", "t", "yes"];
const SORTS: &[&str] = &[
    "",
    "n",
    "-n",
    "title",
    "-title,id",
    "+n",
    "n,-id",
    "-n,created",
    "flag,-n",
    "nope",
    "-n,,id",
    " n",
    "n ",
    "@rowid",
    "-@rowid",
];
const FIELDS: &[&str] = &[
    "",
    "id",
    "id,n",
    "*",
    "id,title:excerpt(5)",
    "title:excerpt(8,true)",
    "id,body:excerpt(12)",
    "body:excerpt(0)",
    "title:excerpt(x)",
    "id,nope",
    "*,title:excerpt(3,true)",
    " id , n ",
    "id,",
    "ID",
];
const FILTERS: &[&str] = &[
    "",
    "n > 10",
    "n < 5 || n > 55",
    "flag = true",
    "title ~ 'a'",
    "n >= 100",
    "bad filter",
];

/// One list request's query string.
fn query(rng: &mut Rng) -> String {
    let mut parts = Vec::new();
    let params: [(&str, &[&str], u64); 6] = [
        ("page", PAGES, 70),
        ("perPage", PER_PAGES, 70),
        ("skipTotal", SKIP_TOTALS, 40),
        ("sort", SORTS, 70),
        ("fields", FIELDS, 50),
        ("filter", FILTERS, 40),
    ];
    for (name, pool, pct) in params {
        if rng.pct(pct) {
            let v = *rng.pick(pool);
            parts.push(format!("{name}={}", enc(v)));
        }
    }
    parts.join("&")
}

/// What a list answer says, in a form both servers give alike: status and, for a list, the
/// paging numbers and the items; for an error, its status, message and data.
fn seen(r: &crate::common::Resp) -> Value {
    if r.status != 200 {
        return json!({"status": r.status, "message": r.json["message"], "data": r.json["data"]});
    }
    let items: Vec<Value> = r.json["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    let mut i = i.clone();
                    if let Some(o) = i.as_object_mut() {
                        // Creation times differ between the servers by the millisecond.
                        for k in ["created", "updated"] {
                            if o.contains_key(k) {
                                o.insert(k.into(), json!("<ts>"));
                            }
                        }
                    }
                    i
                })
                .collect()
        })
        .unwrap_or_default();
    json!({"status": 200, "page": r.json["page"], "perPage": r.json["perPage"],
           "totalItems": r.json["totalItems"], "totalPages": r.json["totalPages"], "items": items})
}

fn fixture(server: &crate::common::Server, su: &str) {
    server.create_collection(
        su,
        json!({"name": "things", "listRule": "", "viewRule": "",
               "fields": [{"name": "title", "type": "text"}, {"name": "body", "type": "editor"},
                          {"name": "n", "type": "number"}, {"name": "flag", "type": "bool"},
                          {"name": "created", "type": "autodate", "onCreate": true}]}),
    );
    for i in 0..61 {
        let r = server.req(
            "POST",
            "/api/collections/things/records",
            Some(su),
            Some(
                &json!({"id": format!("thing{i:010}"), "title": format!("title {i} abc"),
                         "body": format!("<p>Body <b>number</b> {i} with some words</p>"),
                         "n": (i * 37) % 61, "flag": i % 3 == 0}),
            ),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
}

#[test]
fn generated_list_queries_page_sort_and_pick_fields_as_the_reference_does() {
    let Some(Pair {
        reference,
        subject,
        ref_su,
        sub_su,
        subject_name,
    }) = start_pair()
    else {
        return;
    };
    let (seed, n) = (seed(), cases("DIFF_LIST_CASES", 400));
    println!("listing differential: seed={seed:#x} cases={n}");
    fixture(&reference, &ref_su);
    fixture(&subject, &sub_su);
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let mut lists = 0;
    for _ in 0..n {
        let q = query(&mut rng);
        let path = format!("/api/collections/things/records?{q}");
        let want = seen(&reference.req("GET", &path, None, None));
        let got = seen(&subject.req("GET", &path, None, None));
        if want["status"] == 200 {
            lists += 1;
        }
        if want != got {
            mismatches.push(format!(
                "?{q}\n  reference: {want}\n  {subject_name}: {got}"
            ));
        }
    }
    println!("listing differential: {lists} of {n} answered with a list by the reference");
    assert!(
        lists > n / 4,
        "the generator must mostly make lists: {lists}"
    );
    none_differ(&mismatches, n, "list queries answered", seed, 12);
}

/// One record's view with generated `fields` (and a few other parameters that a view ignores
/// or refuses), on the same fixture.
#[test]
fn generated_record_views_pick_fields_as_the_reference_does() {
    let Some(Pair {
        reference,
        subject,
        ref_su,
        sub_su,
        subject_name,
    }) = start_pair()
    else {
        return;
    };
    let (seed, n) = (seed(), cases("DIFF_LIST_CASES", 400) / 2);
    println!("view differential: seed={seed:#x} cases={n}");
    fixture(&reference, &ref_su);
    fixture(&subject, &sub_su);
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    for _ in 0..n {
        let id = match rng.below(10) {
            0 => "nope".to_owned(),
            1 => "thing000000006".to_owned(),
            _ => format!("thing{:010}", rng.below(61)),
        };
        let mut parts = Vec::new();
        if rng.pct(80) {
            let v = *rng.pick(FIELDS);
            parts.push(format!("fields={}", enc(v)));
        }
        if rng.pct(20) {
            let v = *rng.pick(&["", "nope", "title"]);
            parts.push(format!("expand={}", enc(v)));
        }
        if rng.pct(20) {
            let v = *rng.pick(SORTS);
            parts.push(format!("sort={}", enc(v)));
        }
        let path = format!("/api/collections/things/records/{id}?{}", parts.join("&"));
        let strip = |r: crate::common::Resp| {
            let mut v = r.json;
            for k in ["created", "updated"] {
                if let Some(o) = v.as_object_mut()
                    && o.contains_key(k)
                {
                    o.insert(k.into(), json!("<ts>"));
                }
            }
            json!({"status": r.status, "body": v})
        };
        let want = strip(reference.req("GET", &path, None, None));
        let got = strip(subject.req("GET", &path, None, None));
        if want != got {
            mismatches.push(format!(
                "{path}\n  reference: {want}\n  {subject_name}: {got}"
            ));
        }
    }
    none_differ(&mismatches, n, "views answered", seed, 12);
}

/// Lists between writes: creates (and now and then a delete or an update) on both servers, each
/// followed by generated lists over a collection without an index on `n` and one with, with
/// ties on `n` everywhere. A write makes every cached list stale; ferrobase then carries counts
/// and sorted first rows over the inserts (`store::carried`), which must give what the reference
/// reads afresh. Ties included where the order of tied rows is SQLite's for any plan (without
/// an index: a scan in rowid order); on the indexed collection the sort ends with `id`, since
/// there the order of tied rows follows the plan, which the reference's SQLite (a newer version,
/// with its own statistics) may choose otherwise: without the `id`, about 1 list in 80 differs
/// there in the order of tied rows only, the same before rows were carried.
#[test]
fn generated_lists_between_writes_match_the_reference() {
    const SORTS: &[&str] = &[
        "", "n", "-n", "flag,-n", "-flag,n", "title", "-n,title", "@rowid", "-@rowid", "-n,-flag",
    ];
    const FILTERS: &[&str] = &["", "n > 3", "flag = true", "n < 2 || n > 6", "title ~ '1'"];
    const COLLECTIONS: &[&str] = &["plain", "indexed"];
    let Some(Pair {
        reference,
        subject,
        ref_su,
        sub_su,
        subject_name,
    }) = start_pair()
    else {
        return;
    };
    let (seed, n) = (seed(), cases("DIFF_LIST_CASES", 400) / 4);
    println!("lists between writes: seed={seed:#x} rounds={n}");
    for (server, su) in [(&reference, &ref_su), (&subject, &sub_su)] {
        for name in COLLECTIONS {
            let indexes = match *name {
                "indexed" => json!([format!("CREATE INDEX idx_{name}_n ON {name} (n)")]),
                _ => json!([]),
            };
            server.create_collection(
                su,
                json!({"name": name, "listRule": "", "viewRule": "", "createRule": "",
                       "updateRule": "", "deleteRule": "", "indexes": indexes,
                       "fields": [{"name": "title", "type": "text"},
                                  {"name": "n", "type": "number"}, {"name": "flag", "type": "bool"}]}),
            );
        }
    }
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let (mut next, mut lists) = (0usize, 0usize);
    let mut made: Vec<(&str, String)> = Vec::new();
    for _ in 0..n {
        // A write on both servers, the same one.
        let coll = *rng.pick(COLLECTIONS);
        let base = format!("/api/collections/{coll}/records");
        let (method, path, body) = match rng.below(10) {
            0 if !made.is_empty() => {
                let (c, id) = made.remove(rng.below(made.len()));
                ("DELETE", format!("/api/collections/{c}/records/{id}"), None)
            }
            1 if !made.is_empty() => {
                let (c, id) = &made[rng.below(made.len())];
                let body = json!({"n": rng.below(8), "flag": rng.pct(50)});
                (
                    "PATCH",
                    format!("/api/collections/{c}/records/{id}"),
                    Some(body),
                )
            }
            _ => {
                next += 1;
                let id = format!("row{next:012}");
                made.push((coll, id.clone()));
                let body = json!({"id": id, "title": format!("t{}", rng.below(40)),
                                  "n": rng.below(8), "flag": rng.pct(40)});
                ("POST", base.clone(), Some(body))
            }
        };
        for server in [&reference, &subject] {
            let r = server.req(method, &path, None, body.as_ref());
            assert!(
                r.status == 200 || r.status == 204,
                "{method} {path}: {}",
                r.json
            );
        }
        for _ in 0..1 + rng.below(3) {
            let coll = *rng.pick(COLLECTIONS);
            let mut q = vec![format!("perPage={}", 1 + rng.below(40))];
            if rng.pct(30) {
                q.push(format!("page={}", 1 + rng.below(3)));
            }
            if rng.pct(80) {
                let sort = *rng.pick(SORTS);
                let sort = match coll {
                    "indexed" if sort.is_empty() => "id".to_owned(),
                    "indexed" => format!("{sort},id"),
                    _ => sort.to_owned(),
                };
                q.push(format!("sort={}", enc(&sort)));
            }
            if rng.pct(50) {
                let filter = *rng.pick(FILTERS);
                q.push(format!("filter={}", enc(filter)));
            }
            let path = format!("/api/collections/{coll}/records?{}", q.join("&"));
            let want = seen(&reference.req("GET", &path, None, None));
            let got = seen(&subject.req("GET", &path, None, None));
            lists += 1;
            if want != got {
                mismatches.push(format!(
                    "{path}\n  reference: {want}\n  {subject_name}: {got}"
                ));
            }
        }
    }
    println!("lists between writes: {lists} lists after {n} writes");
    none_differ(
        &mismatches,
        lists,
        "lists between writes answered",
        seed,
        12,
    );
}
