//! The ownership rules of ARCHITECTURE.md, checked by reading the sources: `rusqlite` only under
//! `store/`, `wasmtime` only under `plugins/`, `axum` only under `api/` and `app.rs`, no SQL
//! text under `api/` or `records/`, every file opening with its `//!` line, every `#[allow]`
//! with its reason, no `unwrap()` outside tests. Each rule is also shown failing on a bad file.

use std::path::{Path, PathBuf};

/// The words that mark a string literal as SQL text.
const SQL_WORDS: &[&str] = &[
    "SELECT ",
    "INSERT INTO",
    "UPDATE ",
    "DELETE FROM",
    "CREATE TABLE",
    "CREATE VIEW",
    "CREATE INDEX",
    "DROP ",
    "ALTER TABLE",
    "PRAGMA ",
    "SAVEPOINT",
];

/// Which crate may be named where: (crate, the paths allowed to name it).
const OWNERS: &[(&str, &[&str])] = &[
    ("rusqlite", &["store/"]),
    ("wasmtime", &["plugins/"]),
    ("axum", &["api/", "app.rs"]),
];

/// The part of a file that is not tests: everything before its `#[cfg(test)]` module (the
/// house puts tests last).
fn non_test(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// A line without its `//` comment (good enough for this code: no `//` inside the strings the
/// rules look at).
fn code(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with("//") {
        return "";
    }
    match line.find(" //") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Every rule `text` (the file at `rel`, relative to `host/src/`) breaks.
fn violations(rel: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !text.starts_with("//!") {
        out.push(format!("{rel}: does not open with its `//!` line"));
    }
    let body = non_test(text);
    for (n, line) in body.lines().enumerate() {
        let line_no = n + 1;
        let c = code(line);
        for (krate, allowed) in OWNERS {
            let named = c.contains(&format!("{krate}::")) || c.contains(&format!("use {krate}"));
            if named && !allowed.iter().any(|a| rel.starts_with(a) || rel == *a) {
                out.push(format!(
                    "{rel}:{line_no}: names `{krate}` (only {} may)",
                    allowed.join(", ")
                ));
            }
        }
        if (rel.starts_with("api/") || rel.starts_with("records/"))
            && c.contains('"')
            && SQL_WORDS.iter().any(|w| c.contains(w))
        {
            out.push(format!(
                "{rel}:{line_no}: SQL text outside the store and query"
            ));
        }
        if c.contains(".unwrap()") {
            out.push(format!("{rel}:{line_no}: unwrap() outside tests"));
        }
    }
    // `#[allow(...)]`, possibly over several lines, must say why.
    let mut rest = text;
    while let Some(i) = rest.find("#[allow(") {
        let attr = &rest[i..];
        let end = attr.find(")]").map_or(attr.len(), |e| e + 2);
        if !attr[..end].contains("reason") {
            let line_no = text.len() - rest.len() + i;
            let line_no = text[..line_no].lines().count() + 1;
            out.push(format!("{rel}:{line_no}: #[allow] without a reason"));
        }
        rest = &attr[end..];
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read the source tree") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_sources_keep_the_ownership_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 30, "found only {} sources", files.len());
    let mut all = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(f).unwrap();
        all.extend(violations(&rel, &text));
    }
    assert!(
        all.is_empty(),
        "{} violations:\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn each_rule_fails_on_a_file_that_breaks_it() {
    let ok = "//! Owns nothing.\n\nfn f() {}\n";
    assert!(violations("api/x.rs", ok).is_empty());
    let cases: &[(&str, &str, &str)] = &[
        ("api/x.rs", "fn f() {}\n", "does not open"),
        (
            "api/x.rs",
            "//! x\nuse rusqlite::Connection;\n",
            "names `rusqlite`",
        ),
        (
            "records/x.rs",
            "//! x\nfn f(c: &rusqlite::Connection) {}\n",
            "names `rusqlite`",
        ),
        (
            "api/x.rs",
            "//! x\nuse wasmtime::Engine;\n",
            "names `wasmtime`",
        ),
        ("store/x.rs", "//! x\nuse axum::Router;\n", "names `axum`"),
        (
            "api/x.rs",
            "//! x\nconst Q: &str = \"SELECT id FROM t\";\n",
            "SQL text",
        ),
        (
            "records/x.rs",
            "//! x\nlet s = format!(\"DELETE FROM {t}\");\n",
            "SQL text",
        ),
        (
            "query/x.rs",
            "//! x\nfn f() { g().unwrap(); }\n",
            "unwrap()",
        ),
        (
            "query/x.rs",
            "//! x\n#[allow(dead_code)]\nfn f() {}\n",
            "without a reason",
        ),
        (
            "query/x.rs",
            "//! x\n#[allow(\n    clippy::x,\n)]\nfn f() {}\n",
            "without a reason",
        ),
    ];
    for (rel, text, want) in cases {
        let v = violations(rel, text);
        assert!(
            v.iter().any(|m| m.contains(want)),
            "{rel} {text:?}: expected a violation containing {want:?}, got {v:?}"
        );
    }
    // What the rules allow: the owners themselves, comments, tests, reasons.
    let allowed: &[(&str, &str)] = &[
        ("store/x.rs", "//! x\nuse rusqlite::Connection;\n"),
        ("app.rs", "//! x\nuse axum::Router;\n"),
        (
            "api/x.rs",
            "//! x\n// SELECT is mentioned in a comment; rusqlite:: too\n",
        ),
        (
            "api/x.rs",
            "//! x\n#[cfg(test)]\nmod tests { fn t() { f().unwrap(); } }\n",
        ),
        (
            "api/x.rs",
            "//! x\n#[allow(clippy::x, reason = \"why\")]\nfn f() {}\n",
        ),
    ];
    for (rel, text) in allowed {
        assert!(
            violations(rel, text).is_empty(),
            "{rel} {text:?}: {:?}",
            violations(rel, text)
        );
    }
}
