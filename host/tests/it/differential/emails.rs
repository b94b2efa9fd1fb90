//! E-mail addresses: PocketBase checks them with one rule (ozzo-validation's `is.EmailFormat`,
//! govalidator's pattern): email fields and `meta.senderAddress`. Generated address-like strings
//! go to an email field and to the sender address on both servers; each side's verdicts are
//! compared string by string.
//!
//! `DIFF_EMAIL_CASES` sets the number of strings (default 600 times `DIFF_SCALE`).

use super::{Pair, Rng, cases, none_differ, seed, start_pair};
use serde_json::json;

const LOCALS: &[&str] = &[
    "a",
    "john.doe",
    "x_y",
    "a+tag",
    "A.B-c",
    "o'neil",
    "#!$%&'*+-/=?^_`{|}~",
    ".a",
    "a.",
    "a..b",
    "\"q\"",
    "\"qq\"",
    "\"\"",
    "\"a b\"",
    "\"(a\"",
    "\"a\"b\"",
    "ü",
    "名前",
    "a b",
    "",
    "a@b",
    "a\\b",
    "(c)a",
    "a,b",
    "1",
    "-",
    "\"\\\"\"",
    "a\u{00A0}b",
];
const DOMAINS: &[&str] = &[
    "example.com",
    "a.b",
    "b",
    "localhost",
    "ex-ample.com",
    "-ex.com",
    "ex-.com",
    "a_b.com",
    "a~b.com",
    "x.y.z.w",
    "example.c0m",
    "example.1com",
    "example.c",
    "example.com.",
    "example..com",
    ".example.com",
    "bücher.de",
    "例え.テスト",
    "[1.2.3.4]",
    "1.2.3.4",
    "ex ample.com",
    "example.co_m",
    "example.co-m",
    "example.-com",
    "a.b.",
    "",
    "e.x.a.m.p.l.e",
];

/// One address-like string: a local part, `@`, a domain, now and then a character inserted
/// or taken out, or a very long part.
fn address(rng: &mut Rng) -> String {
    let mut s = if rng.pct(5) {
        rng.pick(LOCALS).to_string()
    } else {
        format!("{}@{}", rng.pick(LOCALS), rng.pick(DOMAINS))
    };
    if rng.pct(15) && !s.is_empty() {
        let at = rng.below(s.chars().count());
        let c = *rng.pick(&[
            ' ', '.', '@', '-', '_', '"', '\t', 'é', '(', '+', '\u{2028}',
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
    if rng.pct(3) {
        s = format!("{}@example.com", "a".repeat(60 + rng.below(300)));
    }
    s
}

/// How a server takes `s`: as an email field's value and as `meta.senderAddress` (status and
/// the error code of each).
fn verdicts(p: &Pair, reference: bool, s: &str) -> (String, String) {
    let (server, su) = if reference {
        (&p.reference, &p.ref_su)
    } else {
        (&p.subject, &p.sub_su)
    };
    let r = server.req(
        "POST",
        "/api/collections/contacts/records",
        Some(su),
        Some(&json!({"e": s})),
    );
    let field = format!("{} {}", r.status, r.json["data"]["e"]["code"]);
    let r = server.req(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(&json!({"meta": {"senderAddress": s}})),
    );
    let setting = format!(
        "{} {}",
        r.status, r.json["data"]["meta"]["senderAddress"]["code"]
    );
    (field, setting)
}

#[test]
fn generated_addresses_are_taken_or_refused_as_by_the_reference() {
    let Some(p) = start_pair() else {
        return;
    };
    let (seed, n) = (seed(), cases("DIFF_EMAIL_CASES", 600));
    println!("emails differential: seed={seed:#x} cases={n}");
    for (server, su) in [(&p.reference, &p.ref_su), (&p.subject, &p.sub_su)] {
        server.create_collection(
            su,
            json!({"name": "contacts", "fields": [{"name": "e", "type": "email"}]}),
        );
    }
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let (mut taken, mut refused) = (0, 0);
    for _ in 0..n {
        let s = address(&mut rng);
        let want = verdicts(&p, true, &s);
        let got = verdicts(&p, false, &s);
        if want.0.starts_with("200") {
            taken += 1;
        } else {
            refused += 1;
        }
        if want != got {
            mismatches.push(format!(
                "{s:?}\n  reference: field {} / senderAddress {}\n  {}: field {} / senderAddress {}",
                want.0, want.1, p.subject_name, got.0, got.1
            ));
        }
    }
    println!("emails differential: {taken} taken and {refused} refused by the reference");
    // The generator must exercise both sides of the rule.
    assert!(
        taken > n / 10 && refused > n / 10,
        "{taken} taken, {refused} refused"
    );
    none_differ(&mismatches, n, "strings judged", seed, 25);
}
