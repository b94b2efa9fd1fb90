//! Token attacks against ferrobase and the real PocketBase 0.40.6, with the same expected
//! answers: `alg: none`, an empty HMAC key, an RS256 header, a token of another collection, the
//! other token types (`file`, `verification`, `passwordReset`, `emailChange`) used as an auth
//! token, an expired token, a token from before a password change (tokenKey rotated), a replayed
//! reset or verification token and a reused OTP. Tokens are forged from each server's own key
//! material (read from its data.db), so a valid one is accepted first: every refusal below is
//! the attack's, not a mistake in the forging.

use crate::common::{Server, reference_and_subject};
use crate::security::forge as sign;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};

const PASS: &str = "pass12345678";
const UID: &str = "uuuuuuuuuuuuuu1";
const OID: &str = "oooooooooooooo1";

/// One server's key material: per collection, its id and token secrets; per user, its tokenKey.
struct Keys {
    users_id: String,
    others_id: String,
    users: Value,
    others: Value,
    user_key: String,
    other_key: String,
}

fn keys(s: &Server) -> Keys {
    let db = rusqlite::Connection::open_with_flags(
        s.data_dir().join("data.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let coll = |name: &str| -> (String, Value) {
        db.query_row(
            "SELECT id, options FROM _collections WHERE name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get::<_, String>(1)?)),
        )
        .map(|(id, o)| (id, serde_json::from_str(&o).unwrap()))
        .unwrap()
    };
    let token_key = |table: &str, id: &str| -> String {
        db.query_row(
            &format!("SELECT tokenKey FROM {table} WHERE id = ?1"),
            [id],
            |r| r.get(0),
        )
        .unwrap()
    };
    let (users_id, users) = coll("users");
    let (others_id, others) = coll("others");
    Keys {
        users_id,
        others_id,
        users,
        others,
        user_key: token_key("users", UID),
        other_key: token_key("others", OID),
    }
}

fn hs256() -> Value {
    json!({"alg": "HS256", "typ": "JWT"})
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn setup(s: &Server) -> String {
    let su = s.su_token();
    s.create_collection(&su, json!({"name": "others", "type": "auth"}));
    for (coll, id, email) in [
        ("users", UID, "u1@example.com"),
        ("others", OID, "o1@example.com"),
    ] {
        let r = s.req(
            "POST",
            &format!("/api/collections/{coll}/records"),
            Some(&su),
            Some(&json!({"id": id, "email": email, "password": PASS, "passwordConfirm": PASS})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let r = s.req(
        "PATCH",
        "/api/collections/users",
        Some(&su),
        Some(&json!({"otp": {"enabled": true}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    su
}

/// What `token` gets as an auth token: auth-refresh's status (and its body when refused), and
/// whether a record only its owner may view is shown.
fn probe(s: &Server, token: &str) -> Value {
    let r = s.req(
        "POST",
        "/api/collections/users/auth-refresh",
        Some(token),
        None,
    );
    let body = if r.status == 200 {
        json!("<auth>")
    } else {
        r.json
    };
    let view = s.req(
        "GET",
        &format!("/api/collections/users/records/{UID}"),
        Some(token),
        None,
    );
    json!([r.status, body, view.status])
}

/// Every attack on one server, by name, with its answer.
fn attacks(s: &Server) -> Vec<(String, Value)> {
    let su = setup(s);
    let k = keys(s);
    let secret = |c: &Value, kind: &str| c[kind]["secret"].as_str().unwrap().to_owned();
    let now = now_s();
    let auth = json!({"collectionId": k.users_id, "exp": now + 3600, "id": UID,
        "refreshable": true, "type": "auth"});
    let auth_key = format!("{}{}", k.user_key, secret(&k.users, "authToken"));
    let valid = sign(&hs256(), &auth, &auth_key);
    let mut out = vec![("valid (the forging is right)".to_owned(), probe(s, &valid))];
    let mut case = |name: &str, token: String| out.push((name.to_owned(), probe(s, &token)));

    let head = |v: Value| B64.encode(v.to_string());
    let body = B64.encode(auth.to_string());
    case(
        "alg none, no signature",
        format!("{}.{body}.", head(json!({"alg": "none", "typ": "JWT"}))),
    );
    case(
        "alg none, the valid signature",
        format!(
            "{}.{body}.{}",
            head(json!({"alg": "none", "typ": "JWT"})),
            valid.rsplit('.').next().unwrap()
        ),
    );
    case(
        "alg None",
        format!("{}.{body}.", head(json!({"alg": "None", "typ": "JWT"}))),
    );
    case("HS256 with an empty key", sign(&hs256(), &auth, ""));
    case(
        "HS256 with the secret alone (no tokenKey)",
        sign(&hs256(), &auth, &secret(&k.users, "authToken")),
    );
    case(
        "RS256 header, HMAC signature",
        sign(&json!({"alg": "RS256", "typ": "JWT"}), &auth, &auth_key),
    );
    case(
        "RS256 header, garbage signature",
        format!(
            "{}.{body}.{}",
            head(json!({"alg": "RS256", "typ": "JWT"})),
            B64.encode([7u8; 256])
        ),
    );
    // Another collection's record, with its own valid token.
    let other = json!({"collectionId": k.others_id, "exp": now + 3600, "id": OID,
        "refreshable": true, "type": "auth"});
    let other_key = format!("{}{}", k.other_key, secret(&k.others, "authToken"));
    case(
        "another collection's valid token",
        sign(&hs256(), &other, &other_key),
    );
    let mut cross = auth.clone();
    cross["collectionId"] = json!(k.others_id);
    case(
        "users record claimed in the other collection",
        sign(&hs256(), &cross, &auth_key),
    );
    // The other token types, each signed as its server signs them.
    for (kind, secret_name, extra) in [
        (
            "verification",
            "verificationToken",
            json!({"email": "u1@example.com"}),
        ),
        (
            "passwordReset",
            "passwordResetToken",
            json!({"email": "u1@example.com"}),
        ),
        (
            "emailChange",
            "emailChangeToken",
            json!({"email": "u1@example.com", "newEmail": "x@example.com"}),
        ),
        ("file", "fileToken", json!({})),
    ] {
        let mut claims = auth.clone();
        claims["type"] = json!(kind);
        claims.as_object_mut().unwrap().remove("refreshable");
        for (k2, v) in extra.as_object().unwrap() {
            claims[k2] = v.clone();
        }
        let key = format!("{}{}", k.user_key, secret(&k.users, secret_name));
        case(&format!("a {kind} token"), sign(&hs256(), &claims, &key));
        case(
            &format!("a {kind} token signed with the auth key"),
            sign(&hs256(), &claims, &auth_key),
        );
    }
    let mut expired = auth.clone();
    expired["exp"] = json!(now - 5);
    case("expired", sign(&hs256(), &expired, &auth_key));
    // A real file token used as an auth token.
    let r = s.req("POST", "/api/files/token", Some(&valid), None);
    assert_eq!(r.status, 200, "{}", r.json);
    case(
        "a file token from /api/files/token",
        r.json["token"].as_str().unwrap().to_owned(),
    );

    // A password reset, confirmed twice: the second finds the tokenKey rotated by the first.
    let reset = {
        let mut c = auth.clone();
        c["type"] = json!("passwordReset");
        c["email"] = json!("u1@example.com");
        c.as_object_mut().unwrap().remove("refreshable");
        let key = format!("{}{}", k.user_key, secret(&k.users, "passwordResetToken"));
        sign(&hs256(), &c, &key)
    };
    for i in 0..2 {
        let r = s.req(
            "POST",
            "/api/collections/users/confirm-password-reset",
            None,
            Some(
                &json!({"token": reset, "password": format!("newpass{i}2345"),
                "passwordConfirm": format!("newpass{i}2345")}),
            ),
        );
        out.push((format!("reset confirmed #{i}"), json!([r.status, r.json])));
    }
    out.push((
        "the auth token from before the reset".into(),
        probe(s, &valid),
    ));
    let signs_in = |p: &str| s.login("users", "u1@example.com", p).status;
    out.push((
        "which password signs in after the replay".into(),
        json!([
            signs_in(PASS),
            signs_in("newpass02345"),
            signs_in("newpass12345")
        ]),
    ));

    // A verification, confirmed twice (the tokenKey is the one the reset left).
    let k = keys(s);
    let verify = {
        let mut c = auth.clone();
        c["type"] = json!("verification");
        c["email"] = json!("u1@example.com");
        c.as_object_mut().unwrap().remove("refreshable");
        let key = format!("{}{}", k.user_key, secret(&k.users, "verificationToken"));
        sign(&hs256(), &c, &key)
    };
    for i in 0..2 {
        let r = s.req(
            "POST",
            "/api/collections/users/confirm-verification",
            None,
            Some(&json!({"token": verify})),
        );
        out.push((
            format!("verification confirmed #{i}"),
            json!([r.status, r.json]),
        ));
    }
    let r = s.req(
        "GET",
        &format!("/api/collections/users/records/{UID}"),
        Some(&su),
        None,
    );
    out.push((
        "verified after the replay".into(),
        r.json["verified"].clone(),
    ));

    // A password change by the superuser rotates the tokenKey: a fresh token stops working.
    let fresh = s.login("users", "u1@example.com", "newpass02345");
    assert_eq!(fresh.status, 200, "{}", fresh.json);
    let fresh = fresh.json["token"].as_str().unwrap().to_owned();
    out.push(("a fresh token before the change".into(), probe(s, &fresh)));
    let r = s.req(
        "PATCH",
        &format!("/api/collections/users/records/{UID}"),
        Some(&su),
        Some(&json!({"password": PASS, "passwordConfirm": PASS})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    out.push(("the same token after the change".into(), probe(s, &fresh)));

    // An OTP used twice.
    let r = s.req(
        "POST",
        "/api/collections/_otps/records",
        Some(&su),
        Some(&json!({"collectionRef": k.users_id, "recordRef": UID, "password": "123456"})),
    );
    out.push(("an OTP made by a superuser".into(), json!(r.status)));
    let otp = r.json["id"].as_str().unwrap_or("").to_owned();
    for i in 0..2 {
        let r = s.req(
            "POST",
            "/api/collections/users/auth-with-otp",
            None,
            Some(&json!({"otpId": otp, "password": "123456"})),
        );
        let body = if r.status == 200 {
            json!("<auth>")
        } else {
            r.json
        };
        out.push((format!("the OTP used #{i}"), json!([r.status, body])));
    }
    out
}

#[test]
fn token_attacks_are_refused_as_pocketbase_refuses_them() {
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| attacks(&reference));
        let b = sc.spawn(|| attacks(&subject));
        (a.join().unwrap(), b.join().unwrap())
    });
    // The forging is right (a valid token is accepted) and the attacks are refused.
    assert_eq!(a[0].1[0], 200, "the reference refused the valid token");
    for (name, answer) in &a[1..8] {
        assert_eq!(answer[0], 401, "{name}: {answer}");
    }
    let mut diffs = Vec::new();
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        if x != y {
            diffs.push(format!("{name}\n  reference: {x}\n  ferrobase: {y}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} differ:\n{}",
        diffs.len(),
        a.len(),
        diffs.join("\n")
    );
}
