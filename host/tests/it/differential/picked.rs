//! PocketBase's generic `?fields=`: every JSON answer of its router is reduced to the listed
//! fields (settings, a collection, auth methods, health, crons, scaffolds, backups...), and a
//! `fields` it cannot parse turns a successful answer into its 400 while errors stay as they
//! are. Generated `fields` values on those endpoints, sent to both servers, compared by status
//! and body (times, scaffolds' random index suffixes and our own mail wording left out).
//!
//! `DIFF_PICKED_CASES` sets the number of requests (default 300 times `DIFF_SCALE`).

use super::{Pair, Rng, cases, none_differ, seed, start_pair};
use crate::common::enc;
use serde_json::{Value, json};

const PATHS: &[&str] = &[
    "/api/settings",
    "/api/collections/users",
    "/api/collections/_superusers",
    "/api/collections/nope",
    "/api/collections/users/auth-methods",
    "/api/health",
    "/api/crons",
    "/api/collections/meta/scaffolds",
    "/api/backups",
];
const FIELDS: &[&str] = &[
    "",
    "id",
    "id,name",
    "meta.appName",
    "meta.appName,smtp.port",
    "*",
    "name:excerpt(2,true)",
    "password",
    "password.enabled,oauth2",
    "code",
    "code,message",
    "base.name",
    "auth.fields",
    "key",
    "nope",
    "a:excerpt(x)",
    "name:excerpt(0)",
    "fields.name",
    "*,name:excerpt(3)",
    "meta.*",
    "id,,name",
    " id ",
];

/// Times and mail template bodies (ours are in our own words) left out.
fn scrub(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if (k == "created" || k == "updated") && x.is_string() {
                    *x = json!("<ts>");
                } else if k == "body" && x.is_string() {
                    *x = json!("<text>");
                } else if k == "indexes"
                    && let Value::Array(list) = x
                {
                    // A scaffold's index names end in a random suffix.
                    for ix in list.iter_mut() {
                        if let Value::String(t) = ix
                            && let Some(at) = t.find("` ON")
                            && let Some(us) = t[..at].rfind('_')
                        {
                            *t = format!("{}<suffix>{}", &t[..=us], &t[at..]);
                        }
                    }
                } else {
                    scrub(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

fn seen(r: crate::common::Resp) -> Value {
    let mut body = r.json;
    scrub(&mut body);
    json!({"status": r.status, "body": body})
}

#[test]
fn generated_fields_pick_every_json_answer_as_the_reference_does() {
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
    let (seed, n) = (seed(), cases("DIFF_PICKED_CASES", 300));
    println!("picked differential: seed={seed:#x} cases={n}");
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let mut picked = 0;
    for i in 0..n {
        let fields = *rng.pick(FIELDS);
        let q = format!("fields={}", enc(fields));
        let (method, path, body) = match rng.below(12) {
            // A write that answers with JSON: a settings update, a collection created.
            0 => (
                "PATCH",
                "/api/settings".to_owned(),
                Some(json!({"meta": {"appName": format!("app {}", rng.below(5))}})),
            ),
            1 => (
                "POST",
                "/api/collections".to_owned(),
                Some(
                    json!({"id": format!("pbc_picked{i:05}"), "name": format!("picked{i}"),
                            "fields": [{"name": "t", "type": "text"}]}),
                ),
            ),
            _ => ("GET", (*rng.pick(PATHS)).to_owned(), None),
        };
        let url = format!("{path}?{q}");
        let want = seen(reference.req(method, &url, Some(&ref_su), body.as_ref()));
        let got = seen(subject.req(method, &url, Some(&sub_su), body.as_ref()));
        if want["status"] == 200 && !fields.trim().is_empty() {
            picked += 1;
        }
        if want != got {
            mismatches.push(format!(
                "{method} {url}\n  reference: {want}\n  {subject_name}: {got}"
            ));
        }
    }
    println!("picked differential: {picked} picked answers");
    assert!(picked > n / 4, "the generator must pick answers: {picked}");
    none_differ(&mismatches, n, "answers picked", seed, 10);
}
