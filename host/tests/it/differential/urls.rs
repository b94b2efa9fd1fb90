//! URLs: PocketBase checks every URL it takes with one rule (ozzo-validation's `is.URL`): url
//! fields, `meta.appURL`, the S3 endpoint, OAuth2 provider URLs. Generated URL-like strings go
//! to a url field and to `meta.appURL` on both servers; each side's verdicts are compared
//! string by string.
//!
//! `DIFF_URL_CASES` sets the number of strings (default 600 times `DIFF_SCALE`).

use super::{Pair, Rng, cases, none_differ, seed, start_pair};
use serde_json::json;

const SCHEMES: &[&str] = &[
    "",
    "",
    "http://",
    "https://",
    "ftp://",
    "ws://",
    "wss://",
    "tcp://",
    "udp://",
    "HTTP://",
    "Https://",
    "mailto:",
    "file://",
    "javascript:",
    "http:/",
    "http//",
    "//",
    "git+ssh://",
    "h-t://",
    "irc://",
    "http:///",
];
const USERS: &[&str] = &[
    "",
    "",
    "",
    "user@",
    "user:pass@",
    "@",
    "u ser@",
    ":@",
    "a@b@",
    "ü@",
];
const HOSTS: &[&str] = &[
    "example.com",
    "localhost",
    "a",
    "1.2.3.4",
    "256.1.1.1",
    "10.0.0",
    "[::1]",
    "[fe80::1%25en0]",
    "::1",
    "a_b.com",
    "-a.com",
    "a-.com",
    "xn--bcher-kva.ch",
    "bücher.de",
    "exa mple.com",
    ".example.com",
    "example.com.",
    "ex..com",
    "a.b.c.d.e",
    "123",
    "x.y",
    "EXAMPLE.COM",
    "",
    "*.example.com",
    "例え.テスト",
    "a.b-c.d",
    "sub.domain-.com",
    "[::ffff:1.2.3.4]",
    "a.com:",
    "0.0.0.0",
    "999.999.999.999",
    "1.2.3.4.5",
    "localhost.",
    "x_y",
    "ab",
    "a.b",
];
const PORTS: &[&str] = &[
    "", "", "", ":80", ":0", ":65535", ":65536", ":99999", ":", ":abc", ":8080", ":-1", ":080",
];
const TAILS: &[&str] = &[
    "", "", "/", "/a/b", "/a b", "/é", "/%20", "/a?b=c", "?q", "#frag", "/a#b c", "/~user",
    "/a\tb", "?", "#", "/a//b", "/a?b c", "/.", "/..", "/a;b", "/a|b", "/a\"b", "/<a>", "\\a",
];

/// One URL-like string: pieces of each part, now and then a character inserted or taken out.
fn url(rng: &mut Rng) -> String {
    let mut s = format!(
        "{}{}{}{}{}",
        rng.pick(SCHEMES),
        rng.pick(USERS),
        rng.pick(HOSTS),
        rng.pick(PORTS),
        rng.pick(TAILS)
    );
    if rng.pct(15) && !s.is_empty() {
        let at = rng.below(s.chars().count());
        let c = *rng.pick(&[
            ' ', '.', ':', '/', '@', '-', '_', '%', '#', '?', 'é', '\n', '+',
        ]);
        s = s
            .chars()
            .enumerate()
            .flat_map(|(i, x)| if i == at { vec![c, x] } else { vec![x] })
            .collect();
    }
    if rng.pct(5) && !s.is_empty() {
        let at = rng.below(s.chars().count());
        s = s
            .chars()
            .enumerate()
            .filter_map(|(i, x)| (i != at).then_some(x))
            .collect();
    }
    if rng.pct(2) {
        s = format!("https://example.com/{}", "a".repeat(2060 + rng.below(40)));
    }
    s
}

/// How a server takes `s`: as a url field's value (the record create's status and the field's
/// error code) and as `meta.appURL` (the settings update's status and code).
fn verdicts(p: &Pair, reference: bool, s: &str) -> (String, String) {
    let (server, su) = if reference {
        (&p.reference, &p.ref_su)
    } else {
        (&p.subject, &p.sub_su)
    };
    let r = server.req(
        "POST",
        "/api/collections/links/records",
        Some(su),
        Some(&json!({"u": s})),
    );
    let field = format!("{} {}", r.status, r.json["data"]["u"]["code"]);
    let r = server.req(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(&json!({"meta": {"appURL": s}})),
    );
    let setting = format!("{} {}", r.status, r.json["data"]["meta"]["appURL"]["code"]);
    (field, setting)
}

#[test]
fn generated_urls_are_taken_or_refused_as_by_the_reference() {
    let Some(p) = start_pair() else {
        return;
    };
    let (seed, n) = (seed(), cases("DIFF_URL_CASES", 600));
    println!("urls differential: seed={seed:#x} cases={n}");
    for (server, su) in [(&p.reference, &p.ref_su), (&p.subject, &p.sub_su)] {
        server.create_collection(
            su,
            json!({"name": "links", "fields": [{"name": "u", "type": "url"}]}),
        );
    }
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let (mut taken, mut refused) = (0, 0);
    for _ in 0..n {
        let s = url(&mut rng);
        let want = verdicts(&p, true, &s);
        let got = verdicts(&p, false, &s);
        if want.0.starts_with("200") {
            taken += 1;
        } else {
            refused += 1;
        }
        if want != got {
            mismatches.push(format!(
                "{s:?}\n  reference: field {} / appURL {}\n  {}: field {} / appURL {}",
                want.0, want.1, p.subject_name, got.0, got.1
            ));
        }
    }
    println!("urls differential: {taken} taken and {refused} refused by the reference");
    // The generator must exercise both sides of the rule.
    assert!(
        taken > n / 10 && refused > n / 10,
        "{taken} taken, {refused} refused"
    );
    none_differ(&mismatches, n, "strings judged", seed, 25);
}
