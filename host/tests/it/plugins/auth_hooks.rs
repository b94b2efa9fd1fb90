//! The auth hook (WIT 0.1.2, world `plugin-auth`): the `auth-guard` example refuses sign-ins
//! from emails outside its allow-list and adds notes to the answer's `meta`; a plugin that
//! does not name a collection, or that targets the older world `plugin`, is never asked.

use super::{server_with, wait_loaded};
use crate::common::err;
use serde_json::{Value, json};

const TOML: &str = r#"
[plugins.auth-guard]
grants = ["kv"]
[plugins.auth-guard.config]
allowed_domains = "example.com, corp.test"
[plugins.js-hello]
memory_mb = 128
[plugins.contract-0-1-0]
grants = ["db:read"]
"#;

#[test]
fn the_auth_hook_refuses_or_annotates_sign_ins_before_their_token() {
    let Some(s) = server_with(&["auth_guard", "js-hello", "contract_0_1_0"], TOML) else {
        return;
    };
    let su = s.su_token();
    // js-hello hooks `posts`.
    super::posts_schema(&s, &su, json!(""));
    // js-hello (world `plugin`) and the 0.1.0 fixture load beside the 0.1.2 one.
    let report = wait_loaded(&s, &su, &["auth-guard", "contract-0-1-0", "js-hello"]);
    let guard = super::entry(&report, "auth_guard.wasm");
    assert_eq!(guard["error"], Value::Null, "{report}");

    let users = "/api/collections/users/records";
    for email in ["alice@example.com", "bob@other.test", "carol@Corp.Test"] {
        let r = s.req(
            "POST",
            users,
            Some(&su),
            Some(&json!({"email": email, "password": "password123", "passwordConfirm": "password123"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }

    // Allowed: the token comes with the plugin's notes in `meta`.
    let r = s.login("users", "alice@example.com", "password123");
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["meta"], json!({"guard": "checked", "signIns": "1"}));
    assert!(r.json["token"].as_str().is_some_and(|t| !t.is_empty()));
    let alice = r.json["token"].as_str().unwrap().to_owned();
    // Domains compare without case.
    let r = s.login("users", "carol@Corp.Test", "password123");
    assert_eq!(r.status, 200, "{}", r.json);

    // Refused: the plugin's status and message, PocketBase's body, no token.
    let r = s.login("users", "bob@other.test", "password123");
    assert_eq!(
        r.json,
        err(403, "Sign-ins from this email domain are not allowed."),
        "{}",
        r.json
    );
    assert_eq!(r.status, 403);

    // A wrong password never reaches the hook: PocketBase's 400, nothing counted.
    let r = s.login("users", "alice@example.com", "wrong-password");
    assert_eq!(r.status, 400, "{}", r.json);

    // A refresh is a sign-in too.
    let r = s.req(
        "POST",
        "/api/collections/users/auth-refresh",
        Some(&alice),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["meta"], json!({"guard": "checked", "signIns": "2"}));

    // Superusers are not in the manifest: their sign-in is PocketBase's plain answer.
    let r = s.req(
        "POST",
        "/api/collections/_superusers/auth-refresh",
        Some(&su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert!(r.json.get("meta").is_none(), "{}", r.json);

    let r = s.req("GET", "/api/auth-guard/stats", None, None);
    assert_eq!(
        r.json,
        json!({"password": 2, "otp": 0, "oauth2": 0, "refresh": 1}),
        "the refused and the failed attempts are not counted"
    );
}
