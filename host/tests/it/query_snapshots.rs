//! Snapshot tests of the filter/sort compiler: every case of `snapshots/filters.txt` is compiled
//! on the testkit fixture and the rendered result (SQL + params, or the error) is compared with
//! `snapshots/filters.snap`.
//!
//! `UPDATE_SNAPSHOTS=1 cargo test -p ferrobase --test query_snapshots` rewrites the `.snap` file;
//! otherwise a mismatch fails with a line diff of the first differing case.

use ferrobase::testkit::{Caller, Fixture};
use std::fmt::Write as _;
use std::path::PathBuf;

struct Case {
    name: String,
    collection: String,
    caller: Caller,
    filter: String,
    sort: String,
}

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("snapshots")
}

fn caller_name(c: Caller) -> &'static str {
    match c {
        Caller::Superuser => "superuser",
        Caller::Member => "member",
        Caller::Guest => "guest",
    }
}

/// `key: value` → `Some(value)`; the single space after the colon is optional.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        if let Some(name) = line.strip_prefix("## ") {
            let name = name.trim().to_string();
            assert!(
                seen.insert(name.clone()),
                "filters.txt:{at}: duplicate case {name:?}"
            );
            cases.push(Case {
                name,
                collection: String::new(),
                caller: Caller::Superuser,
                filter: String::new(),
                sort: String::new(),
            });
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let case = cases
            .last_mut()
            .unwrap_or_else(|| panic!("filters.txt:{at}: field outside a case: {line:?}"));
        if let Some(v) = field(line, "collection") {
            case.collection = v.trim().to_string();
        } else if let Some(v) = field(line, "caller") {
            case.caller = match v.trim() {
                "superuser" => Caller::Superuser,
                "member" => Caller::Member,
                "guest" => Caller::Guest,
                other => panic!("filters.txt:{at}: unknown caller {other:?}"),
            };
        } else if let Some(v) = field(line, "filter") {
            case.filter = v.to_string();
        } else if let Some(v) = line.strip_prefix("filter+") {
            case.filter.push('\n');
            case.filter.push_str(v.strip_prefix(' ').unwrap_or(v));
        } else if let Some(v) = field(line, "sort") {
            case.sort = v.to_string();
        } else {
            panic!("filters.txt:{at}: unexpected line {line:?}");
        }
    }
    for c in &cases {
        assert!(
            !c.collection.is_empty(),
            "case {:?} has no collection",
            c.name
        );
    }
    cases
}

/// Break the (single-line) SQL before its main clauses so diffs stay readable.
fn wrap_sql(sql: &str) -> String {
    let mut out = sql.to_string();
    for kw in [" FROM ", " LEFT JOIN ", " WHERE ", " ORDER BY ", " LIMIT "] {
        out = out.replace(kw, &format!("\n    {}", &kw[1..]));
    }
    out
}

/// Params holding a timestamp that is not in the input (date macros such as `@now`) change with
/// the clock: redact them.
fn redact(param: String, input: &str) -> String {
    let inner = param
        .strip_prefix("Text(\"")
        .and_then(|p| p.strip_suffix("\")"))
        .unwrap_or(&param);
    let b = inner.as_bytes();
    let looks_like_date = b.windows(19).any(|w| {
        w.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ' || *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        })
    });
    if looks_like_date && !input.contains(inner) {
        "<date redacted>".into()
    } else {
        param
    }
}

fn render_case(fx: &Fixture, c: &Case) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## {}", c.name);
    let _ = writeln!(out, "{} as {}", c.collection, caller_name(c.caller));
    for (i, l) in c.filter.split('\n').enumerate() {
        let _ = writeln!(out, "{} {l}", if i == 0 { "filter:" } else { "filter+" });
    }
    let _ = writeln!(out, "sort: {}", c.sort);
    match fx.compile(&c.collection, &c.filter, &c.sort, c.caller) {
        Ok(compiled) => {
            let _ = writeln!(out, "sql: {}", wrap_sql(&compiled.sql));
            for (i, p) in compiled.params.into_iter().enumerate() {
                let input = format!("{}\n{}", c.filter, c.sort);
                let _ = writeln!(out, "param {}: {}", i + 1, redact(p, &input));
            }
        }
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
        }
    }
    out
}

const HEADER: &str = "\
# Generated by tests/query_snapshots.rs from filters.txt -- do not edit by hand.
# Regenerate: UPDATE_SNAPSHOTS=1 cargo test -p ferrobase --test query_snapshots
# SQL is broken (for reading only) before FROM / LEFT JOIN / WHERE / ORDER BY / LIMIT.
";

fn render_all(fx: &Fixture, cases: &[Case]) -> String {
    let mut out = String::from(HEADER);
    for c in cases {
        out.push('\n');
        out.push_str(&render_case(fx, c));
    }
    out
}

/// Split a rendered snapshot into `(case name, case text)` blocks.
fn split_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            blocks.push((name.trim().to_string(), String::new()));
        }
        if let Some((_, body)) = blocks.last_mut()
            && !line.is_empty()
        {
            body.push_str(line);
            body.push('\n');
        }
    }
    blocks
}

/// A minimal LCS line diff (`-` expected, `+` actual, ` ` common).
fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        }
    }
    out
}

fn load_cases() -> Vec<Case> {
    let path = snapshot_dir().join("filters.txt");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_cases(&text)
}

#[test]
fn filter_snapshots() {
    let cases = load_cases();
    assert!(!cases.is_empty(), "filters.txt has no cases");
    let fx = Fixture::new();
    let actual = render_all(&fx, &cases);
    let snap = snapshot_dir().join("filters.snap");

    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v != "0" && !v.is_empty()) {
        std::fs::write(&snap, &actual).unwrap_or_else(|e| panic!("write {}: {e}", snap.display()));
        eprintln!("rewrote {} ({} cases)", snap.display(), cases.len());
        return;
    }

    let expected = std::fs::read_to_string(&snap).unwrap_or_else(|e| {
        panic!(
            "read {}: {e}\n(create it with UPDATE_SNAPSHOTS=1 cargo test -p ferrobase --test query_snapshots)",
            snap.display()
        )
    });
    if expected == actual {
        return;
    }

    let exp_blocks = split_blocks(&expected);
    let act_blocks = split_blocks(&actual);
    let differing = act_blocks
        .iter()
        .filter(|(n, body)| !exp_blocks.iter().any(|(en, eb)| en == n && eb == body))
        .count();
    let stale: Vec<&str> = exp_blocks
        .iter()
        .filter(|(n, _)| !act_blocks.iter().any(|(an, _)| an == n))
        .map(|(n, _)| n.as_str())
        .collect();

    let mut msg = format!(
        "query snapshot mismatch: {differing} of {} case(s) differ",
        act_blocks.len()
    );
    if !stale.is_empty() {
        let _ = write!(msg, "; in .snap but not in filters.txt: {stale:?}");
    }
    let first = act_blocks.iter().find_map(|(name, body)| {
        match exp_blocks.iter().find(|(en, _)| en == name) {
            None => Some((name, String::new(), body)),
            Some((_, eb)) if eb != body => Some((name, eb.clone(), body)),
            _ => None,
        }
    });
    match first {
        Some((name, exp, act)) if exp.is_empty() => {
            let _ = write!(
                msg,
                "\n\nfirst difference: case {name:?} is new (not in .snap):\n{act}"
            );
        }
        Some((name, exp, act)) => {
            let _ = write!(
                msg,
                "\n\nfirst differing case {name:?} (- expected, + actual):\n{}",
                line_diff(&exp, act)
            );
        }
        None => {
            let _ = write!(msg, "\n\n(cases match; order or header differs)");
        }
    }
    msg.push_str("\nIf the change is intended: UPDATE_SNAPSHOTS=1 cargo test -p ferrobase --test query_snapshots");
    panic!("{msg}");
}

/// Every statement that compiles must also prepare and run on the fixture tables.
#[test]
fn compiled_snapshot_statements_run() {
    let fx = Fixture::new();
    let mut failures = Vec::new();
    for c in load_cases() {
        if fx
            .compile(&c.collection, &c.filter, &c.sort, c.caller)
            .is_err()
        {
            continue;
        }
        if let Err(e) = fx.run(&c.collection, &c.filter, &c.sort, c.caller) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "compiled statements failed to run:\n{}",
        failures.join("\n")
    );
}
