//! The collections list (`GET /api/collections`): generated `page`, `perPage`, `skipTotal`,
//! `sort`, `filter` and `fields` over the system collections and three of ours, sent to both
//! servers; statuses, error bodies, paging numbers and the listed collections compared (their
//! times left out).
//!
//! `DIFF_COLLECTION_LIST_CASES` sets the number of requests (default 300 times `DIFF_SCALE`).

use super::{Pair, Rng, cases, none_differ, seed, start_pair};
use crate::common::enc;
use serde_json::{Value, json};

const PAGES: &[&str] = &["", "1", "2", "0", "-3", "x", " 1"];
const PER_PAGES: &[&str] = &["", "1", "3", "5", "0", "500", "y"];
const SKIP_TOTALS: &[&str] = &["", "1", "0", "true", "nope"];
const SORTS: &[&str] = &[
    "",
    "name",
    "-name",
    "type,-name",
    "system,name",
    "-system,-type,name",
    "id",
    "-id",
    "nope",
    "name,",
    "@rowid",
    "-@rowid",
];
const FILTERS: &[&str] = &[
    "",
    "system = true",
    "system = false",
    "type = 'auth'",
    "type != 'base'",
    "name ~ 'a'",
    "name ~ '_'",
    "name = 'notes'",
    "id ~ 'pbc'",
    "type = 'view' || name ~ 'es'",
    "created > '2000-01-01'",
    "nope = 1",
    "name ~",
    "fields:length > 0",
];
const FIELDS: &[&str] = &[
    "",
    "id",
    "id,name",
    "name,type,system",
    "*",
    "id,nope",
    "name:excerpt(3)",
];

fn query(rng: &mut Rng) -> String {
    let params: [(&str, &[&str], u64); 6] = [
        ("page", PAGES, 40),
        ("perPage", PER_PAGES, 50),
        ("skipTotal", SKIP_TOTALS, 30),
        ("sort", SORTS, 70),
        ("filter", FILTERS, 60),
        ("fields", FIELDS, 50),
    ];
    let mut parts = Vec::new();
    for (name, pool, pct) in params {
        if rng.pct(pct) {
            let v = *rng.pick(pool);
            parts.push(format!("{name}={}", enc(v)));
        }
    }
    parts.join("&")
}

/// Times, the generated ids of a view's copied fields (both differ between the servers) and
/// mail template bodies left out, everywhere in the answer.
fn scrub(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in ["created", "updated"] {
                if let Some(t) = m.get_mut(k)
                    && t.is_string()
                {
                    *t = json!("<ts>");
                }
            }
            // Mail templates are in our own words (see `differential::Known`).
            for (k, t) in m.iter_mut() {
                if k.ends_with("Template")
                    && let Some(body) = t.get_mut("body")
                {
                    *body = json!("<own wording>");
                }
            }
            if let Some(Value::String(id)) = m.get_mut("id")
                && id.starts_with("_clone_")
            {
                *id = "_clone_<id>".into();
            }
            m.values_mut().for_each(scrub);
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// Where two answers first differ.
fn first_difference(a: &Value, b: &Value) -> String {
    let mut out = Vec::new();
    super::json_diffs(a, b, "", &mut out, 1);
    out.pop().unwrap_or_default()
}

fn seen(r: &crate::common::Resp) -> Value {
    let mut v = if r.status == 200 {
        json!({"status": 200, "page": r.json["page"], "perPage": r.json["perPage"],
               "totalItems": r.json["totalItems"], "totalPages": r.json["totalPages"],
               "items": r.json["items"]})
    } else {
        json!({"status": r.status, "message": r.json["message"], "data": r.json["data"]})
    };
    scrub(&mut v);
    v
}

fn fixture(server: &crate::common::Server, su: &str) {
    for def in [
        json!({"id": "pbc_notes00001", "name": "notes", "fields": [{"name": "text", "type": "text"}]}),
        json!({"id": "pbc_members001", "name": "members", "type": "auth", "fields": []}),
        json!({"id": "pbc_noteview01", "name": "note_view", "type": "view",
               "viewQuery": "SELECT id, text FROM notes"}),
    ] {
        server.create_collection(su, def);
    }
}

#[test]
fn generated_collection_lists_page_sort_and_filter_as_the_reference_does() {
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
    let (seed, n) = (seed(), cases("DIFF_COLLECTION_LIST_CASES", 300));
    println!("collections list differential: seed={seed:#x} cases={n}");
    fixture(&reference, &ref_su);
    fixture(&subject, &sub_su);
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let mut lists = 0;
    for _ in 0..n {
        let q = query(&mut rng);
        let path = format!("/api/collections?{q}");
        let want = seen(&reference.req("GET", &path, Some(&ref_su), None));
        let got = seen(&subject.req("GET", &path, Some(&sub_su), None));
        if want["status"] == 200 {
            lists += 1;
        }
        if want != got {
            mismatches.push(format!(
                "?{q}\n  first difference at {}\n  reference: {want}\n  {subject_name}: {got}",
                first_difference(&want, &got)
            ));
        }
    }
    println!("collections list differential: {lists} of {n} answered with a list");
    assert!(
        lists > n / 4,
        "the generator must mostly make lists: {lists}"
    );
    none_differ(&mismatches, n, "collection lists answered", seed, 10);
}
