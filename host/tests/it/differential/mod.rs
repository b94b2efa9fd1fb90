//! Differential tests: generated requests sent to ferrobase and to the reference PocketBase
//! 0.40.6 started by the test, their answers compared. Ten suites share this plumbing:
//!
//! * `filters`: filters and sorts over a fixed fixture, compared id for id;
//! * `collections`: collection definitions and updates (names, every field type and its
//!   options, rules, indexes, view queries, renames, type changes, required fields added to
//!   collections with records, deletes of referenced collections), compared by status, error
//!   envelope and the collection JSON; the stored records after each schema change too;
//! * `records`: record bodies per field type for create and update with modifiers, as JSON,
//!   multipart and urlencoded, compared by status, error codes and the stored record;
//! * `expand`: expand paths (self-relations, back-relations in both syntaxes, multi relations,
//!   relations to collections with restrictive view rules, depths 1 to 8) with `fields`,
//!   compared JSON for JSON.
//! * `collections_list`: `GET /api/collections` with generated paging, sorts, filters and
//!   `fields`, compared by status, paging numbers and the collections listed;
//! * `listing`: `page`, `perPage`, `skipTotal`, `sort`, `fields` (with `:excerpt`) and simple
//!   filters over a fixed collection, compared by status, error body, paging numbers and items;
//! * `picked`: generated `fields` on the JSON answers PocketBase's router picks generically
//!   (settings, collections, auth methods, health, crons, scaffolds, backups);
//! * `emails`: address-like strings as email field values and as `meta.senderAddress` (one
//!   rule in PocketBase), compared verdict for verdict;
//! * `urls`: URL-like strings as url field values and as `meta.appURL` (PocketBase judges both
//!   with one rule), compared verdict for verdict;
//! * `bodies`: generated bodies on every write endpoint (records, collections, import, settings,
//!   batch, file tokens, realtime) in every encoding and framing a client may send, compared by
//!   status, the masked answer and the state left behind.
//!
//! Run one suite: `cargo test --release -p ferrobase --test it differential::records`.
//!
//! Environment (shared by every suite):
//! * `DIFF_SEED` — seed of the generators (decimal or 0x-hex; printed on every run).
//! * `DIFF_SCALE` — multiplies every suite's default number of cases (default 1).
//! * `DIFF_CASES`, `DIFF_COLLECTION_CASES`, `DIFF_RECORD_CASES`, `DIFF_EXPAND_CASES` — the
//!   number of cases of one suite (filters, collections, records, expand), overriding the scale.
//! * `DIFF_TRACE=1` — the collections suite prints every step as it sends it (with
//!   `--nocapture`), to replay an episode by hand.
//! * `DIFF_BOTH_REFERENCE=1` — the reference PocketBase on both sides: proves a harness
//!   deterministic (it must report no mismatch).
//! * `FERROBASE_REFERENCE_BIN` — the reference binary (default `.venv-ref/bin/pocketbase` at the
//!   workspace root, installed by scripts/test.sh).
//!
//! Each suite writes its full report to `target/differential-<suite>.txt` (workspace target dir)
//! and fails listing the first mismatches. A mismatch that matches one of the suite's documented
//! divergences (`Known`: a glob over the case's text, with the reason) is reported and does not
//! fail.

mod bodies;
mod collections;
mod collections_list;
mod emails;
mod expand;
mod filters;
mod listing;
mod picked;
mod records;
mod urls;

use crate::common::{Resp, Server};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::PathBuf;

/// A case where PocketBase itself is plainly inconsistent and ferrobase deliberately differs
/// (or where the two cannot agree byte for byte, such as our own e-mail wording). `pattern` is a
/// glob (`*` = any run of characters) matched against the case's text; a mismatch matching an
/// entry is reported as known and does not fail the test. Every entry needs a reason a reviewer
/// can check.
pub struct Known {
    pub pattern: &'static str,
    pub reason: &'static str,
}

/// The seed every suite uses unless `DIFF_SEED` says otherwise.
pub const DEFAULT_SEED: u64 = 0x5eed_d1ff;

pub use crate::rng::{Rng, env_num};

// ---------------------------------------------------------------------------------------------
// controls

pub fn seed() -> u64 {
    env_num("DIFF_SEED").unwrap_or(DEFAULT_SEED)
}

/// A suite's number of cases: `var` when set, else `default` times `DIFF_SCALE`.
pub fn cases(var: &str, default: usize) -> usize {
    env_num(var).map_or_else(
        || default * env_num("DIFF_SCALE").unwrap_or(1) as usize,
        |n| n as usize,
    )
}

pub fn both_reference() -> bool {
    std::env::var("DIFF_BOTH_REFERENCE").is_ok_and(|v| !v.is_empty() && v != "0")
}

pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = text.chars().collect();
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

pub fn known_in(list: &'static [Known], text: &str) -> Option<&'static Known> {
    list.iter().find(|k| glob(k.pattern, text))
}

/// A finding is known when its case matches `cases`, or when every one of its detail lines
/// matches `details` (the first such entry is the one reported).
pub fn known_finding(
    cases: &'static [Known],
    details: &'static [Known],
    text: &str,
    lines: &[String],
) -> Option<&'static Known> {
    if let Some(k) = known_in(cases, text) {
        return Some(k);
    }
    let each: Option<Vec<&'static Known>> = lines.iter().map(|l| known_in(details, l)).collect();
    each.and_then(|v| v.first().copied())
}

// ---------------------------------------------------------------------------------------------
// the two servers

/// The reference and the server under test (ferrobase, or a second reference), each with a
/// superuser token.
pub struct Pair {
    pub reference: Server,
    pub subject: Server,
    pub ref_su: String,
    pub sub_su: String,
    pub subject_name: &'static str,
}

/// Both servers started side by side, or None (with the skip message) without the reference.
pub fn start_pair() -> Option<Pair> {
    let both_ref = both_reference();
    let (reference, subject) = crate::common::reference_and_subject(both_ref)?;
    let (ref_su, sub_su) = (reference.su_token(), subject.su_token());
    Some(Pair {
        reference,
        subject,
        ref_su,
        sub_su,
        subject_name: if both_ref { "reference#2" } else { "ferrobase" },
    })
}

/// One answer: the status (0 when the request itself failed) and the JSON body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// How long the request took.
    pub secs: f64,
}

/// What a request needs besides the server: its token (the side's superuser with `Su`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Auth<'a> {
    Su,
    Token(&'a str),
    Guest,
}

/// A request's body as bytes with its content type.
pub struct Body<'a> {
    pub content_type: &'a str,
    pub bytes: &'a [u8],
}

impl Pair {
    /// Send the same request to both servers at once; (reference, subject).
    pub fn both(
        &self,
        method: &str,
        path: &str,
        auth: (Auth<'_>, Auth<'_>),
        body: Option<Body<'_>>,
    ) -> (Reply, Reply) {
        let send = |s: &Server, su: &str, a: Auth<'_>| {
            let token = match a {
                Auth::Su => Some(su),
                Auth::Token(t) => Some(t),
                Auth::Guest => None,
            };
            let t0 = std::time::Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                s.raw(
                    method,
                    path,
                    token,
                    body.as_ref().map(|b| (b.content_type, b.bytes)),
                )
            }));
            match r {
                Ok(Resp { status, json, .. }) => Reply {
                    status,
                    body: json,
                    secs: t0.elapsed().as_secs_f64(),
                },
                Err(_) => Reply {
                    status: 0,
                    body: Value::String("transport failure (see the panic above)".into()),
                    secs: t0.elapsed().as_secs_f64(),
                },
            }
        };
        std::thread::scope(|sc| {
            let a = sc.spawn(|| send(&self.reference, &self.ref_su, auth.0));
            let b = send(&self.subject, &self.sub_su, auth.1);
            (a.join().expect("reference request"), b)
        })
    }

    /// `both` as superuser with a JSON body.
    pub fn su_json(&self, method: &str, path: &str, body: Option<&Value>) -> (Reply, Reply) {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
        self.both(
            method,
            path,
            (Auth::Su, Auth::Su),
            bytes.as_deref().map(|b| Body {
                content_type: "application/json",
                bytes: b,
            }),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// comparing

/// `v` with every object's keys sorted (PocketBase's `fields=` output has no key order).
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Where `a` and `b` differ, as `path: a / b` lines (at most `max`).
pub fn json_diffs(a: &Value, b: &Value, path: &str, out: &mut Vec<String>, max: usize) {
    if out.len() >= max || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => json_diffs(u, v, &p, out, max),
                    (u, v) => out.push(format!("{p}: {} / {}", show(u), show(v))),
                }
                if out.len() >= max {
                    return;
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                json_diffs(u, v, &format!("{path}[{i}]"), out, max);
            }
        }
        _ => out.push(format!("{path}: {} / {}", short(a), short(b))),
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "(absent)".to_owned(), short)
}

/// A value's JSON cut to a readable length.
pub fn short(v: &Value) -> String {
    clip(&v.to_string(), 300)
}

pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}…({} chars)", s.chars().count())
}

/// An error envelope reduced to what is compared: the message and, for each nested `data`
/// entry, its code and params (and the message, kept apart: some carry SQLite's own words).
pub fn error_shape(body: &Value) -> (Value, Value) {
    fn walk(v: &Value, codes: &mut Map<String, Value>, msgs: &mut Map<String, Value>, p: &str) {
        let Value::Object(m) = v else { return };
        if let Some(Value::String(code)) = m.get("code") {
            let mut entry = Map::new();
            entry.insert("code".into(), Value::String(code.clone()));
            if let Some(params) = m.get("params") {
                entry.insert("params".into(), params.clone());
            }
            codes.insert(p.to_owned(), Value::Object(entry));
            if let Some(msg) = m.get("message") {
                msgs.insert(p.to_owned(), msg.clone());
            }
            return;
        }
        for (k, v) in m {
            let q = if p.is_empty() {
                k.clone()
            } else {
                format!("{p}.{k}")
            };
            walk(v, codes, msgs, &q);
        }
    }
    let (mut codes, mut msgs) = (Map::new(), Map::new());
    walk(&body["data"], &mut codes, &mut msgs, "");
    let mut head = Map::new();
    head.insert("message".into(), body["message"].clone());
    head.insert("data".into(), Value::Object(codes));
    (Value::Object(head), Value::Object(msgs))
}

// ---------------------------------------------------------------------------------------------
// reporting

/// One disagreement.
pub struct Finding {
    /// Which generated case (its index).
    pub case: usize,
    /// The case in one line (request and what was sent); `Known` patterns match it.
    pub text: String,
    /// What differed, one line each.
    pub details: Vec<String>,
    pub known: Option<&'static Known>,
    /// A consequence of an earlier mismatch in the same episode (state already diverged).
    pub follow_on: bool,
}

/// Fail when any of the `n` generated cases of a simple suite (one line of text per mismatch)
/// went otherwise than on the reference: `what` names them ("strings judged", "views
/// answered"); the first `show` are printed, each clipped.
pub fn none_differ(mismatches: &[String], n: usize, what: &str, seed: u64, show: usize) {
    assert!(
        mismatches.is_empty(),
        "{} of {n} {what} otherwise than by PocketBase (seed {seed:#x}):\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(show)
            .map(|m| clip(m, 2000))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Write the suite's report, print its summary, and fail when a mismatch is unexplained.
pub fn conclude(suite: &str, header: &str, findings: &[Finding], subject: &str, reproduce: &str) {
    let failing: Vec<&Finding> = findings.iter().filter(|f| f.known.is_none()).collect();
    let primary = failing.iter().filter(|f| !f.follow_on).count();
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "{header}\n{} mismatches vs {subject} ({primary} first in their episode, {} follow-on), {} known divergences",
        failing.len(),
        failing.len() - primary,
        findings.len() - failing.len()
    );
    let block = |f: &Finding| {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "#{:04}{} {}",
            f.case,
            if f.follow_on { " (follow-on)" } else { "" },
            clip(&f.text, 2000)
        );
        for d in &f.details {
            let _ = writeln!(s, "    {}", clip(d, 2000));
        }
        if let Some(k) = f.known {
            let _ = writeln!(s, "    known divergence `{}`: {}", k.pattern, k.reason);
        }
        s
    };
    let mut full = summary.clone();
    for f in findings {
        full.push_str(&block(f));
    }
    let out = report_path(suite);
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&out, &full);
    println!("{summary}");
    if failing.is_empty() {
        return;
    }
    let mut msg = summary;
    // First mismatches of their episode first: the follow-ons usually share their cause.
    let mut shown: Vec<&&Finding> = failing.iter().filter(|f| !f.follow_on).collect();
    shown.extend(failing.iter().filter(|f| f.follow_on));
    for f in shown.iter().take(30) {
        msg.push_str(&block(f));
    }
    if failing.len() > 30 {
        let _ = writeln!(msg, "… and {} more", failing.len() - 30);
    }
    let _ = writeln!(
        msg,
        "full list: {}; reproduce with {reproduce}",
        out.display()
    );
    panic!("{msg}");
}

pub fn report_path(suite: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/differential-{suite}.txt"))
}

// ---------------------------------------------------------------------------------------------
// values for record fields

/// Text of `n` characters cycling through a mix of ASCII, accents, CJK and emoji.
pub fn long_text(n: usize) -> String {
    const MIX: &[char] = &['a', 'é', '日', '🎉', ' ', 'Z', '\'', '"', '%', '_'];
    (0..n).map(|i| MIX[i % MIX.len()]).collect()
}

/// A JSON text of up to `depth` levels: objects with keys in no particular order, arrays,
/// strings with escapes and characters that need none, and numbers as Go writes a float64 (a
/// text's numbers are kept as written by both servers only when spelled that way; PocketBase
/// keeps other spellings such as `1.0` verbatim, which ferrobase writes as `1`), with spaces
/// between the tokens now and then.
pub fn json_text(r: &mut Rng, depth: usize) -> String {
    const KEYS: &[&str] = &[
        "a", "b", "z", "Z", "_", "10", "2", "é", "日本", "a b", "", "aa", "ab",
    ];
    const NUMBERS: &[&str] = &[
        "0",
        "-0",
        "1",
        "-1",
        "7",
        "100",
        "1.5",
        "-2.25",
        "0.1",
        "0.000001",
        "1e-7",
        "-1e-11",
        "5e-324",
        "100000000000000000000",
        "1e+21",
        "123456789123.45679",
        "1.2345678901234569e+23",
        "9007199254740992",
        "9007199254740993",
        "-9007199254740993",
        "18446744073709551615",
        "1.7976931348623157e+308",
    ];
    const STRINGS: &[&str] = &[
        r#""""#,
        r#""x""#,
        r#""<a&b>""#,
        r#""\u00e9t\u00e9""#,
        r#""\n\t\"\\""#,
        r#""日本""#,
        r#""\u2028""#,
        r#""\ud83c\udf89""#,
        r#""\/""#,
    ];
    let space = |r: &mut Rng| if r.pct(15) { " " } else { "" };
    // Mostly objects and arrays at the top, where a lone value has little to show.
    let pick = if depth >= 3 && r.pct(80) {
        4 + r.below(3)
    } else {
        r.below(if depth == 0 { 4 } else { 7 })
    };
    match pick {
        0 => (*r.pick(NUMBERS)).to_owned(),
        1 => (*r.pick(STRINGS)).to_owned(),
        2 => (*r.pick(&["true", "false", "null"])).to_owned(),
        3 => (*r.pick(NUMBERS)).to_owned(),
        4 => {
            let n = r.below(4);
            let items: Vec<String> = (0..n).map(|_| json_text(r, depth - 1)).collect();
            format!("[{}{}]", items.join(&format!(",{}", space(r))), space(r))
        }
        _ => {
            let mut keys: Vec<&str> = Vec::new();
            for _ in 0..1 + r.below(5) {
                let k = *r.pick(KEYS);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let members: Vec<String> = keys
                .iter()
                .map(|k| {
                    let key = serde_json::to_string(k).expect("a key");
                    format!("{key}{}:{}{}", space(r), space(r), json_text(r, depth - 1))
                })
                .collect();
            format!("{{{}{}}}", space(r), members.join(","))
        }
    }
}

/// JSON nested `depth` levels deep (arrays), as text.
pub fn nested_json_text(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// A value for a record field described by its collection JSON `field` (type and options):
/// valid and invalid values of its type, values of other types, hostile ones. `rel_ids` are
/// ids a relation may point at (existing and not).
pub fn sample_value(r: &mut Rng, field: &Value, rel_ids: &[String]) -> Value {
    use serde_json::json;
    let kind = field["type"].as_str().unwrap_or("text");
    // Now and then a value of no particular type, whatever the field.
    if r.pct(8) {
        return r
            .pick(&[
                json!(null),
                json!(""),
                json!(0),
                json!(true),
                json!([]),
                json!({}),
                json!("'; DROP TABLE users; --"),
                json!("a\u{0}b"),
                json!([1, "a", null]),
                json!({"a": {"b": 1}}),
            ])
            .clone();
    }
    match kind {
        "text" | "password" => match r.below(20) {
            0 => json!(""),
            1 => json!("  padded  "),
            2 => json!("日本語テキスト"),
            3 => json!("emoji 🎉 party"),
            4 => json!(long_text(5000)),
            5 => json!(long_text(5001)),
            6 => json!(long_text(10_000)),
            7 => json!("with\u{0}nul"),
            8 => json!("line\nbreak\ttab"),
            9 => json!(42),
            10 => json!(1.5),
            11 => json!(["a", "b"]),
            12 => json!("x"),
            13 => json!("abc123"),
            14 => json!("ABCDEFGHIJ"),
            15 => json!("1234567890abcde"),
            16 => json!("\u{202e}rtl"),
            _ => json!(format!("t{}", r.below(1000))),
        },
        "editor" => match r.below(8) {
            0 => json!("<p>Hi <b>there</b></p>"),
            1 => json!("<script>alert(1)</script>"),
            2 => json!(long_text(20_000)),
            3 => json!(""),
            4 => json!("<a href=\"/x\">rel</a>"),
            5 => json!(7),
            _ => json!("plain"),
        },
        "number" => r
            .pick(&[
                json!(0),
                json!(1),
                json!(-1),
                json!(1.5),
                json!(-2.25),
                json!(42),
                json!(1e308),
                json!(-1e308),
                json!(1e-300),
                json!(9_007_199_254_740_993_i64),
                json!(i64::MAX),
                json!(u64::MAX),
                json!(5e-324),
                json!("12"),
                json!("1e3"),
                json!("abc"),
                json!(""),
                json!(" 5"),
                json!("NaN"),
                json!("Infinity"),
                json!("-inf"),
                json!("0x1p4"),
                json!("1_000"),
                json!(true),
                json!(false),
                json!(null),
                json!([3]),
                json!({"a": 1}),
                json!(100),
                json!(-100),
                json!(10),
                json!(99.999),
            ])
            .clone(),
        "bool" => r
            .pick(&[
                json!(true),
                json!(false),
                json!("true"),
                json!("TRUE"),
                json!("t"),
                json!("1"),
                json!("yes"),
                json!("false"),
                json!(0),
                json!(1),
                json!(2),
                json!(-1),
                json!(null),
                json!(""),
                json!([true]),
            ])
            .clone(),
        "email" => r
            .pick(&[
                json!("a@b.co"),
                json!("User@Example.COM"),
                json!("user@sub.example.com"),
                json!("x@localhost"),
                json!("bad"),
                json!("a@b"),
                json!("a b@c.de"),
                json!("a@b..co"),
                json!("\"q\"@example.com"),
                // Quoted local parts as Go compiles govalidator's pattern (one character per
                // quote), and a last domain part with a digit.
                json!("\"qq\"@example.com"),
                json!("\"a\"b\"@example.com"),
                json!("\"(a\"@example.com"),
                json!("\"@example.com"),
                json!("\"\"@example.com"),
                json!("x@a.b.1c"),
                json!("ü@example.com"),
                json!(""),
                json!(format!("{}@example.com", "x".repeat(300))),
                json!("a@allowed.com"),
                json!("a@blocked.com"),
                json!(5),
            ])
            .clone(),
        "url" => r
            .pick(&[
                json!("https://example.com"),
                json!("http://x"),
                json!("example.com"),
                json!("ftp://a.b/c"),
                json!("not a url"),
                json!("javascript:alert(1)"),
                json!("https://ex ample.com"),
                json!(""),
                json!("http://localhost:8090/a?b#c"),
                json!("https://allowed.com/x"),
                json!("https://blocked.com"),
                json!("mailto:a@b.co"),
                json!("//example.com"),
                json!("https://例え.jp"),
                json!(3),
            ])
            .clone(),
        "date" | "autodate" => r
            .pick(&[
                json!("2024-05-06"),
                json!("2024-05-06 07:08:09"),
                json!("2024-05-06T07:08:09Z"),
                json!("2024-05-06T07:08:09.123456Z"),
                json!("2024-05-06T07:08:09+02:00"),
                json!("2024-05-06 07:08:09.123Z"),
                json!("2024-05-06T07:08"),
                json!("2024-13-01"),
                json!("2024-02-30"),
                json!("garbage"),
                json!("1714979289"),
                json!(1_714_979_289),
                json!(""),
                json!(null),
                json!("0001-01-01"),
                json!("9999-12-31 23:59:59.999Z"),
                json!("2024-05-06T07:08:09.1Z"),
                json!(" 2024-05-06"),
                json!("2024-5-6"),
                json!("20240506"),
                json!("2024-05-06T07:08:09-05:30"),
                json!("2024-05-06T07:08:09+0200"),
                json!("2024-05-06 07:08:09 +0000 UTC"),
                json!("Mon, 06 May 2024 07:08:09 GMT"),
                json!("2024-05-06T24:00:00Z"),
                json!("1999-12-31"),
                json!("2030-01-01 00:00:00.000Z"),
            ])
            .clone(),
        "select" => {
            let values: Vec<Value> = field["values"].as_array().cloned().unwrap_or_default();
            let mut pool = values.clone();
            pool.extend([json!("bogus"), json!(""), json!(null), json!(1)]);
            match r.below(6) {
                0 | 1 if !values.is_empty() => r.pick(&values).clone(),
                2 => Value::Array(r.subset(&pool, 5)),
                3 if !values.is_empty() => {
                    let v = r.pick(&values).clone();
                    json!([v.clone(), v])
                }
                _ => r.pick(&pool).clone(),
            }
        }
        "relation" => {
            let mut pool: Vec<Value> = rel_ids.iter().map(|s| json!(s)).collect();
            pool.extend([json!("missing0000000x"), json!(""), json!(null)]);
            match r.below(5) {
                0 => Value::Array(r.subset(&pool, 4)),
                1 => json!([]),
                _ => r.pick(&pool).clone(),
            }
        }
        "json" => match r.below(32) {
            22.. => {
                // Generated JSON: sent as its text (kept as written) or as a value (decoded
                // and encoded again by the server).
                let text = json_text(r, 3);
                if r.pct(50) {
                    json!(text)
                } else {
                    serde_json::from_str(&text).expect("generated JSON parses")
                }
            }
            0 => json!(null),
            1 => json!(1),
            2 => json!("str"),
            3 => json!("{\"a\":1}"),
            4 => json!("not json {"),
            5 => json!("123"),
            6 => json!("\"q\""),
            7 => json!("[1,2"),
            8 => json!(nested_json_text(200)),
            9 => json!(nested_json_text(10_001)),
            10 => json!(true),
            11 => json!({"a": {"b": [1, 2]}}),
            12 => json!(""),
            13 => json!("null"),
            14 => json!("  {\"a\":1}"),
            15 => json!("\u{1}"),
            16 => json!([1, "two", {"three": 3}]),
            17 => json!({"long": long_text(3000)}),
            18 => json!(-1e308),
            19 => json!("-1e400"),
            20 => {
                // deeply nested as a value, not as text
                let mut v = json!(1);
                for _ in 0..100 {
                    v = json!([v]);
                }
                v
            }
            _ => json!({"k": "v"}),
        },
        "geoPoint" => r
            .pick(&[
                json!({"lon": 1, "lat": 2}),
                json!({"lon": 23.32, "lat": 42.69}),
                json!({"lon": 200, "lat": 0}),
                json!({"lon": 0, "lat": -91}),
                json!({"lon": -180, "lat": 90}),
                json!("{\"lon\":5,\"lat\":6}"),
                json!({"lon": "5", "lat": "6"}),
                json!({}),
                json!(null),
                json!("bad"),
                json!({"lat": 1}),
                json!([1, 2]),
                json!({"lon": 1, "lat": 2, "x": 3}),
            ])
            .clone(),
        "file" => r
            .pick(&[
                json!(""),
                json!(null),
                json!([]),
                json!("x.png"),
                json!(["a.txt"]),
            ])
            .clone(),
        _ => json!("x"),
    }
}
