//! End-to-end HTTP tests against a real `ferrobase serve` process. Expected values are
//! PocketBase 0.40.6's (see ../shared/docs/pocketbase-api.md in the workplace).

use crate::common::{SU_EMAIL, SU_PASS, Server, enc, err};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const BAD_REQUEST: &str = "Something went wrong while processing your request.";
const NOT_FOUND: &str = "The requested resource wasn't found.";
const SUPERUSERS_ONLY: &str = "Only superusers can perform this action.";
const REQUIRES_AUTH: &str = "The request requires valid record authorization token.";

fn posts_def() -> Value {
    json!({
        "name": "posts", "type": "base",
        "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
        "fields": [
            {"name": "title", "type": "text", "required": true},
            {"name": "views", "type": "number"},
            {"name": "published", "type": "bool"},
            {"name": "status", "type": "select", "values": ["draft", "live"], "maxSelect": 1},
            {"name": "meta", "type": "json"},
            {"name": "created", "type": "autodate", "onCreate": true},
            {"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true}
        ]
    })
}

fn is_record_id(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 15
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// `YYYY-MM-DD HH:MM:SS.mmmZ`
fn is_pb_date(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let b = s.as_bytes();
        s.len() == 24
            && b[4] == b'-'
            && b[10] == b' '
            && b[13] == b':'
            && b[19] == b'.'
            && b[23] == b'Z'
    })
}

fn list(s: &Server, coll: &str, query: &str, token: Option<&str>) -> crate::common::Resp {
    s.req(
        "GET",
        &format!("/api/collections/{coll}/records?{query}"),
        token,
        None,
    )
}

fn titles(r: &crate::common::Resp) -> Vec<String> {
    r.json["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["title"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn health_headers_and_unknown_routes() {
    let s = Server::start();
    let r = s.req("GET", "/api/health", None, None);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json,
        json!({"message": "API is healthy.", "code": 200, "data": {}})
    );
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));

    assert_eq!(s.req("HEAD", "/api/health", None, None).status, 200);

    let su = s.su_token();
    let r = s.req("GET", "/api/health", Some(&su), None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json["message"], "API is healthy.");
    assert_eq!(r.json["data"]["realIP"], "127.0.0.1");
    assert_eq!(r.json["data"]["possibleProxyHeader"], "");
    assert!(r.json["data"]["canBackup"].is_boolean(), "{}", r.json);

    // Unknown paths fall through to the static handler; a wrong method on a known path is a 404.
    let r = s.req("GET", "/api/definitely-not-a-route", None, None);
    assert_eq!((r.status, r.json), (404, err(404, "File not found.")));
    let r = s.req("DELETE", "/api/health", None, None);
    assert_eq!((r.status, r.json), (404, err(404, NOT_FOUND)));
    let r = s.req(
        "PUT",
        "/api/collections/users/records",
        None,
        Some(&json!({})),
    );
    assert_eq!((r.status, r.json), (404, err(404, NOT_FOUND)));

    let r = s.req("OPTIONS", "/api/collections/users/records", None, None);
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET,HEAD,PUT,PATCH,POST,DELETE")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type,authorization")
    );
}

#[test]
fn superuser_login_and_token_forms() {
    let s = Server::start();
    let r = s.login("_superusers", SU_EMAIL, SU_PASS);
    assert_eq!(r.status, 200, "{}", r.json);
    let tok = r.json["token"].as_str().expect("token").to_owned();
    assert_eq!(tok.split('.').count(), 3, "a JWT");
    let rec = &r.json["record"];
    assert_eq!(rec["email"], SU_EMAIL);
    assert_eq!(rec["collectionName"], "_superusers");
    assert_eq!(rec["collectionId"], "pbc_3142635823");
    assert_eq!(rec["verified"], true);
    assert!(
        rec.get("password").is_none() && rec.get("tokenKey").is_none(),
        "{rec}"
    );

    // The token is accepted raw and with a (case-insensitive) Bearer prefix.
    for header in [
        tok.clone(),
        format!("Bearer {tok}"),
        format!("bearer {tok}"),
    ] {
        let r = s.req("GET", "/api/collections", Some(&header), None);
        assert_eq!(r.status, 200, "{header}: {}", r.json);
    }
    let r = s.req("GET", "/api/collections", None, None);
    assert_eq!((r.status, r.json), (401, err(401, REQUIRES_AUTH)));
    let r = s.req("GET", "/api/collections", Some("not.a.token"), None);
    assert_eq!((r.status, r.json), (401, err(401, REQUIRES_AUTH)));
    let mut forged = tok.clone();
    forged.push('x');
    assert_eq!(
        s.req("GET", "/api/collections", Some(&forged), None).status,
        401
    );

    let r = s.login("_superusers", SU_EMAIL, "wrong-password");
    assert_eq!(
        (r.status, r.json),
        (400, err(400, "Failed to authenticate."))
    );
    let r = s.login("_superusers", "nobody@example.com", SU_PASS);
    assert_eq!(
        (r.status, r.json),
        (400, err(400, "Failed to authenticate."))
    );

    let path = "/api/collections/_superusers/auth-with-password";
    let r = s.req("POST", path, None, Some(&json!({})));
    let blank = json!({"code": "validation_required", "message": "Cannot be blank."});
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json,
        json!({"data": {"identity": blank, "password": blank},
               "message": "An error occurred while validating the submitted data.", "status": 400})
    );
    // auth endpoints of a non-auth collection
    s.create_collection(&tok, posts_def());
    let r = s.req(
        "POST",
        "/api/collections/posts/auth-with-password",
        None,
        Some(&json!({"identity": "a", "password": "b"})),
    );
    assert_eq!(
        (r.status, r.json),
        (404, err(404, "Missing or invalid auth collection context."))
    );
}

#[test]
fn collections_api_basics() {
    let s = Server::start();
    let su = s.su_token();
    let r = s.req("GET", "/api/collections?perPage=500", Some(&su), None);
    assert_eq!(r.status, 200);
    let names: Vec<&str> = r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"_superusers") && names.contains(&"users"),
        "{names:?}"
    );

    let c = s.create_collection(&su, posts_def());
    assert_eq!(c["name"], "posts");
    assert_eq!(c["type"], "base");
    assert_eq!(c["system"], false);
    assert_eq!(c["listRule"], "");
    let fields = c["fields"].as_array().unwrap();
    assert_eq!(fields[0]["name"], "id", "the id field is added first");
    assert_eq!(fields[0]["primaryKey"], true);
    assert!(c["id"].as_str().unwrap().starts_with("pbc_"), "{c}");
    assert!(is_pb_date(&c["created"]));

    let by_name = s.req("GET", "/api/collections/posts", Some(&su), None);
    let by_id = s.req(
        "GET",
        &format!("/api/collections/{}", c["id"].as_str().unwrap()),
        Some(&su),
        None,
    );
    assert_eq!((by_name.status, by_id.status), (200, 200));
    assert_eq!(by_name.json, by_id.json);

    let dup = s.req("POST", "/api/collections", Some(&su), Some(&posts_def()));
    assert_eq!(dup.status, 400, "{}", dup.json);
    assert_eq!(dup.json["message"], "Failed to create collection.");
    assert!(dup.json["data"]["name"]["code"].is_string(), "{}", dup.json);

    let r = s.req("GET", "/api/collections/nope", Some(&su), None);
    assert_eq!((r.status, r.json), (404, err(404, NOT_FOUND)));
    let r = s.req("DELETE", "/api/collections/_superusers", Some(&su), None);
    assert_eq!(
        r.status, 400,
        "system collections cannot be deleted: {}",
        r.json
    );
    let r = s.req("DELETE", "/api/collections/posts", Some(&su), None);
    assert_eq!((r.status, r.json), (204, Value::Null));
    let r = s.req("GET", "/api/collections/posts/records", Some(&su), None);
    assert_eq!(
        (r.status, r.json),
        (404, err(404, "Missing collection context."))
    );
}

#[test]
fn records_crud_and_serialization() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(&su, posts_def());
    let base = "/api/collections/posts/records";

    let body = json!({"title": "Hello", "views": "42.5", "published": "true", "status": ["draft", "live"],
                      "meta": {"k": [1, 2, {"x": null}]}, "created": "2000-01-01 00:00:00.000Z"});
    let r = s.req("POST", base, None, Some(&body));
    assert_eq!(r.status, 200, "create returns 200: {}", r.json);
    let rec = r.json.clone();
    assert!(is_record_id(&rec["id"]), "{rec}");
    assert_eq!(rec["collectionName"], "posts");
    assert_eq!(rec["title"], "Hello");
    assert_eq!(rec["views"], 42.5);
    assert_eq!(rec["published"], true);
    assert_eq!(
        rec["status"], "live",
        "select single keeps the last element"
    );
    assert_eq!(rec["meta"], json!({"k": [1, 2, {"x": null}]}));
    assert!(
        is_pb_date(&rec["created"]) && rec["created"] != "2000-01-01 00:00:00.000Z",
        "{rec}"
    );
    let id = rec["id"].as_str().unwrap().to_owned();

    let r = s.req("POST", base, None, Some(&json!({"title": "Empty"})));
    assert_eq!(r.status, 200);
    for (k, v) in [
        ("views", json!(0)),
        ("published", json!(false)),
        ("status", json!("")),
        ("meta", Value::Null),
    ] {
        assert_eq!(r.json[k], v, "empty value of {k}: {}", r.json);
    }
    assert!(r.json.as_object().unwrap().contains_key("meta"));

    let r = s.req("POST", base, None, Some(&json!({"views": 3})));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json,
        json!({"data": {"title": {"code": "validation_required", "message": "Cannot be blank."}},
               "message": "Failed to create record.", "status": 400})
    );
    let r = s.req(
        "POST",
        base,
        None,
        Some(&json!({"title": "x", "status": "bogus"})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["data"]["status"]["code"], "validation_invalid_value");

    let path = format!("{base}/{id}");
    let r = s.req("GET", &path, None, None);
    assert_eq!((r.status, &r.json), (200, &rec));

    let r = s.req(
        "PATCH",
        &path,
        None,
        Some(&json!({"title": "Hello 2", "views+": 5})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["title"], "Hello 2");
    assert_eq!(r.json["views"], 47.5);
    assert_eq!(r.json["created"], rec["created"]);
    let r = s.req(
        "PATCH",
        &path,
        None,
        Some(&json!({"id": "aaaaaaaaaaaaaaa"})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["data"]["id"]["code"], "validation_pk_change");

    let r = s.req("DELETE", &path, None, None);
    assert_eq!((r.status, r.json), (204, Value::Null));
    let x = json!({"title": "x"});
    for m in ["GET", "PATCH", "DELETE"] {
        let r = s.req(m, &path, None, (m == "PATCH").then_some(&x));
        assert_eq!(
            (r.status, r.json),
            (404, err(404, NOT_FOUND)),
            "{m} after delete"
        );
    }
}

#[test]
fn list_paging_sort_and_fields() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(&su, posts_def());
    for i in 1..=5 {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": format!("t{i}"), "views": i})),
        );
        assert_eq!(r.status, 200);
    }
    let r = list(&s, "posts", "", None);
    assert_eq!(r.status, 200);
    assert_eq!(
        (r.json["page"].clone(), r.json["perPage"].clone()),
        (json!(1), json!(30))
    );
    assert_eq!(
        (r.json["totalItems"].clone(), r.json["totalPages"].clone()),
        (json!(5), json!(1))
    );

    let r = list(&s, "posts", "perPage=2&page=3&sort=views", None);
    assert_eq!(titles(&r), ["t5"]);
    assert_eq!(r.json["totalPages"], 3);
    let r = list(&s, "posts", "perPage=2&page=9", None);
    assert_eq!(r.json["items"], json!([]));
    let r = list(&s, "posts", "sort=-views", None);
    assert_eq!(titles(&r), ["t5", "t4", "t3", "t2", "t1"]);
    let r = list(&s, "posts", "sort=-title", None);
    assert_eq!(titles(&r)[0], "t5");

    let r = list(&s, "posts", "perPage=5000", None);
    assert_eq!(r.json["perPage"], 1000, "perPage is capped and echoed");
    let r = list(&s, "posts", "page=0&perPage=0", None);
    assert_eq!(
        (r.json["page"].clone(), r.json["perPage"].clone()),
        (json!(1), json!(30))
    );
    let r = list(&s, "posts", "skipTotal=1", None);
    assert_eq!(
        (r.json["totalItems"].clone(), r.json["totalPages"].clone()),
        (json!(-1), json!(-1))
    );
    assert_eq!(r.json["items"].as_array().unwrap().len(), 5);
    for q in ["page=abc", "perPage=1.5", "skipTotal=maybe"] {
        let r = list(&s, "posts", q, None);
        assert_eq!((r.status, r.json), (400, err(400, BAD_REQUEST)), "{q}");
    }

    let r = list(&s, "posts", "fields=id,title&sort=views", None);
    assert_eq!(r.status, 200);
    let item = r.json["items"][0].as_object().unwrap();
    let mut keys: Vec<&str> = item.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["id", "title"]);
    assert!(
        r.json.get("totalItems").is_some(),
        "fields shapes only items"
    );

    let r = list(
        &s,
        "posts",
        &format!("filter={}", enc("views >= 4 && title != 't5'")),
        None,
    );
    assert_eq!(titles(&r), ["t4"]);
    assert_eq!(r.json["totalItems"], 1);
    let r = list(
        &s,
        "posts",
        &format!("filter={}&sort=-views", enc("title ~ 't'")),
        None,
    );
    assert_eq!(r.json["totalItems"], 5);
}

#[test]
fn bad_filters_and_sorts_are_refused() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(&su, posts_def());
    for q in [
        format!("filter={}", enc("title =")),
        format!("filter={}", enc("(title = 'a'")),
        format!("filter={}", enc("nosuchfield = 1")),
        format!("filter={}", enc("views > 1.5e3")),
        format!("filter={}", enc("views > 1 &&")),
        "sort=nosuchfield".to_owned(),
    ] {
        for token in [None, Some(su.as_str())] {
            let r = list(&s, "posts", &q, token);
            assert_eq!((r.status, r.json), (400, err(400, BAD_REQUEST)), "{q}");
        }
    }
    let r = list(
        &s,
        "posts",
        &format!("filter={}", enc("@request.auth.id = ''")),
        None,
    );
    assert_eq!(
        (r.status, r.json),
        (403, err(403, "Only superusers can filter by @request."))
    );
}

#[test]
fn bad_input_leaves_the_database_untouched() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "notes", "listRule": "", "viewRule": "", "createRule": "", "updateRule": "",
               "fields": [{"name": "title", "type": "text"}]}),
    );
    let base = "/api/collections/notes/records";
    let count = |s: &Server| list(s, "notes", "", Some(&su)).json["totalItems"].clone();

    let r = s.raw(
        "POST",
        base,
        None,
        Some(("application/json", b"{\"title\": \"half")),
    );
    assert_eq!((r.status, r.json), (400, err(400, BAD_REQUEST)));
    let r = s.raw("POST", base, None, Some(("application/json", b"[1,2]")));
    assert_eq!((r.status, r.json), (400, err(400, BAD_REQUEST)));
    assert_eq!(count(&s), 0);

    let (status, body) = s.head_only_post(base, 33 * 1024 * 1024);
    assert_eq!((status, body), (413, err(413, "Request entity too large.")));
    assert_eq!(count(&s), 0);

    // A SQL-looking collection name is just an unknown collection.
    let evil = "/api/collections/x%27%3Bdrop%20table%20users--/records";
    let x = json!({"title": "x"});
    let r = s.req("GET", evil, None, None);
    assert_eq!(
        (r.status, r.json),
        (404, err(404, "Missing collection context."))
    );
    let r = s.req("POST", evil, Some(&su), Some(&x));
    assert_eq!(r.status, 404);
    assert_eq!(
        s.req("GET", "/api/collections/users", Some(&su), None)
            .status,
        200
    );
    assert_eq!(list(&s, "users", "", Some(&su)).status, 200);

    // SQL-looking values are stored and read back verbatim, and match as plain strings.
    let evil_values = [
        "'; DROP TABLE notes; --",
        "Robert'); DELETE FROM notes;--",
        "\" OR 1=1 --",
        "%_\\",
    ];
    for v in evil_values {
        let r = s.req("POST", base, None, Some(&json!({"title": v})));
        assert_eq!(r.status, 200, "{}", r.json);
        assert_eq!(r.json["title"], v);
        let back = s.req(
            "GET",
            &format!("{base}/{}", r.json["id"].as_str().unwrap()),
            None,
            None,
        );
        assert_eq!(back.json["title"], v);
    }
    assert_eq!(count(&s), 4);
    let r = list(
        &s,
        "notes",
        &format!("filter={}", enc("title = \"'; DROP TABLE notes; --\"")),
        None,
    );
    assert_eq!(titles(&r), [evil_values[0]]);
    let r = list(
        &s,
        "notes",
        &format!("filter={}", enc("title ~ \"' OR '1'='1\"")),
        None,
    );
    assert_eq!(r.json["totalItems"], 0);

    for id in ["nope", "%27%20OR%20%271%27%3D%271", "aaaaaaaaaaaaaaa"] {
        let r = s.req("GET", &format!("{base}/{id}"), None, None);
        assert_eq!((r.status, r.json), (404, err(404, NOT_FOUND)), "{id}");
    }
    assert_eq!(count(&s), 4);
}

#[test]
fn auth_collection_signup_login_refresh_and_password_change() {
    let s = Server::start();
    let su = s.su_token();
    let base = "/api/collections/users/records";
    let r = s.req("GET", "/api/collections/users/auth-methods", None, None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json["password"]["enabled"], true);

    let mismatch = json!({"email": "alice@example.com", "password": "alicepass123", "passwordConfirm": "other12345"});
    let r = s.req("POST", base, None, Some(&mismatch));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json,
        json!({"data": {"passwordConfirm": {"code": "validation_values_mismatch", "message": "Values don't match."}},
               "message": "Failed to create record.", "status": 400})
    );
    let signup = json!({"email": "alice@example.com", "password": "alicepass123", "passwordConfirm": "alicepass123"});
    let r = s.req("POST", base, None, Some(&signup));
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_owned();
    assert!(
        r.json.get("password").is_none() && r.json.get("tokenKey").is_none(),
        "{}",
        r.json
    );
    assert_eq!(r.json["verified"], false);
    let r = s.req("POST", base, None, Some(&signup));
    assert_eq!(r.status, 400);
    assert_eq!(r.json["data"]["email"]["code"], "validation_not_unique");

    let r = s.login("users", "alice@example.com", "alicepass123");
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["record"]["id"], id.as_str());
    assert_eq!(r.json["record"]["email"], "alice@example.com");
    let tok = r.json["token"].as_str().unwrap().to_owned();

    // users: list/view = "id = @request.auth.id"
    assert_eq!(list(&s, "users", "", None).json["totalItems"], 0);
    let mine = list(&s, "users", "", Some(&tok));
    assert_eq!(mine.json["totalItems"], 1);
    assert_eq!(mine.json["items"][0]["email"], "alice@example.com");
    let r = s.req("GET", "/api/collections", Some(&tok), None);
    assert_eq!(
        (r.status, r.json),
        (
            403,
            err(
                403,
                "The authorized record is not allowed to perform this action."
            )
        )
    );

    let refresh = "/api/collections/users/auth-refresh";
    let r = s.req("POST", refresh, Some(&tok), None);
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["record"]["id"], id.as_str());
    let tok2 = r.json["token"].as_str().unwrap().to_owned();
    assert_eq!(
        s.req("POST", refresh, Some(&tok2), None).status,
        200,
        "the refreshed token works"
    );
    let r = s.req("POST", refresh, None, None);
    assert_eq!((r.status, r.json), (401, err(401, REQUIRES_AUTH)));
    let me = format!("{base}/{id}");
    let r = s.req(
        "PATCH",
        &me,
        Some(&tok),
        Some(&json!({"password": "newpass12345", "passwordConfirm": "newpass12345"})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["data"]["oldPassword"]["code"], "validation_required");
    let wrong_old = json!({"oldPassword": "nope12345", "password": "newpass12345", "passwordConfirm": "newpass12345"});
    let r = s.req("PATCH", &me, Some(&tok), Some(&wrong_old));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["data"]["oldPassword"]["code"],
        "validation_invalid_old_password"
    );
    let r = s.req("PATCH", &me, Some(&tok), Some(&json!({"verified": true})));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["data"]["verified"]["code"],
        "validation_values_mismatch"
    );

    let change = json!({"oldPassword": "alicepass123", "password": "newpass12345", "passwordConfirm": "newpass12345"});
    let r = s.req("PATCH", &me, Some(&tok), Some(&change));
    assert_eq!(r.status, 200, "{}", r.json);
    // The tokenKey rotated: every earlier token is dead.
    for old in [&tok, &tok2] {
        let r = s.req("POST", refresh, Some(old), None);
        assert_eq!((r.status, r.json), (401, err(401, REQUIRES_AUTH)));
    }
    assert_eq!(
        list(&s, "users", "", Some(&tok)).json["totalItems"],
        0,
        "old token is a guest"
    );
    let r = s.login("users", "alice@example.com", "alicepass123");
    assert_eq!(
        (r.status, r.json),
        (400, err(400, "Failed to authenticate."))
    );
    assert_eq!(
        s.login("users", "alice@example.com", "newpass12345").status,
        200
    );
    let tok3 = s.login("users", "alice@example.com", "newpass12345").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // A token of another auth collection: 403, and PocketBase names the *token's* collection.
    let r = s.req("POST", refresh, Some(&su), None);
    let from = |c: &str| {
        err(
            403,
            &format!("The request requires auth record from {c} collection."),
        )
    };
    assert_eq!((r.status, r.json), (403, from("_superusers")));
    let r = s.req(
        "POST",
        "/api/collections/_superusers/auth-refresh",
        Some(&tok3),
        None,
    );
    assert_eq!((r.status, r.json), (403, from("users")));
}

#[test]
fn rules_null_empty_and_expressions() {
    let s = Server::start();
    let su = s.su_token();
    let fields = json!([{"name": "title", "type": "text"}, {"name": "published", "type": "bool"}]);
    s.create_collection(&su, json!({"name": "locked", "fields": fields}));
    s.create_collection(
        &su,
        json!({"name": "open", "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
               "fields": fields}),
    );
    s.create_collection(
        &su,
        json!({"name": "gated", "listRule": "published = true", "viewRule": "published = true",
               "createRule": "title != 'blocked'", "updateRule": "published = true", "deleteRule": "published = true",
               "fields": fields}),
    );

    // null rules: superusers only, for every action.
    let rec = s.req(
        "POST",
        "/api/collections/locked/records",
        Some(&su),
        Some(&json!({"title": "a"})),
    );
    assert_eq!(rec.status, 200);
    let path = format!(
        "/api/collections/locked/records/{}",
        rec.json["id"].as_str().unwrap()
    );
    for (m, p) in [
        ("GET", "/api/collections/locked/records"),
        ("POST", "/api/collections/locked/records"),
        ("GET", &path),
        ("PATCH", &path),
        ("DELETE", &path),
    ] {
        let body = json!({"title": "b"});
        let r = s.req(
            m,
            p,
            None,
            if m == "POST" || m == "PATCH" {
                Some(&body)
            } else {
                None
            },
        );
        assert_eq!(
            (r.status, r.json),
            (403, err(403, SUPERUSERS_ONLY)),
            "guest {m} {p}"
        );
    }
    assert_eq!(list(&s, "locked", "", Some(&su)).json["totalItems"], 1);

    // "" rules: public.
    let r = s.req(
        "POST",
        "/api/collections/open/records",
        None,
        Some(&json!({"title": "g"})),
    );
    assert_eq!(r.status, 200);
    let path = format!(
        "/api/collections/open/records/{}",
        r.json["id"].as_str().unwrap()
    );
    assert_eq!(list(&s, "open", "", None).json["totalItems"], 1);
    assert_eq!(
        s.req("PATCH", &path, None, Some(&json!({"title": "h"})))
            .json["title"],
        "h"
    );
    assert_eq!(s.req("DELETE", &path, None, None).status, 204);

    // Expressions: list filters, view/update/delete miss -> 404, create miss -> 400.
    let r = s.req(
        "POST",
        "/api/collections/gated/records",
        None,
        Some(&json!({"title": "blocked"})),
    );
    assert_eq!(
        (r.status, r.json),
        (400, err(400, "Failed to create record."))
    );
    let hidden = s.req(
        "POST",
        "/api/collections/gated/records",
        None,
        Some(&json!({"title": "draft"})),
    );
    let shown = s.req(
        "POST",
        "/api/collections/gated/records",
        None,
        Some(&json!({"title": "pub", "published": true})),
    );
    assert_eq!((hidden.status, shown.status), (200, 200));
    let r = list(&s, "gated", "", None);
    assert_eq!(
        (titles(&r), r.json["totalItems"].clone()),
        (vec!["pub".to_owned()], json!(1))
    );
    assert_eq!(
        list(&s, "gated", "", Some(&su)).json["totalItems"],
        2,
        "superusers bypass rules"
    );
    let hp = format!(
        "/api/collections/gated/records/{}",
        hidden.json["id"].as_str().unwrap()
    );
    let x = json!({"title": "x"});
    for m in ["GET", "PATCH", "DELETE"] {
        let r = s.req(m, &hp, None, (m == "PATCH").then_some(&x));
        assert_eq!(
            (r.status, r.json),
            (404, err(404, NOT_FOUND)),
            "guest {m} on a rule miss"
        );
    }
    assert_eq!(s.req("GET", &hp, Some(&su), None).status, 200);
}

#[test]
fn sigterm_exits_cleanly_and_checkpoints_the_wal() {
    let mut s = Server::start_process();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "notes", "createRule": "", "fields": [{"name": "title", "type": "text"}]}),
    );
    for i in 0..20 {
        let r = s.req(
            "POST",
            "/api/collections/notes/records",
            None,
            Some(&json!({"title": format!("n{i}")})),
        );
        assert_eq!(r.status, 200);
    }
    let dir = s.data_dir();
    let t = Instant::now();
    let status = s
        .stop(Duration::from_secs(10))
        .expect("the process exits after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(dir.join("data.db").exists());
    let wal = dir.join("data.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        wal_len,
        0,
        "{} must be checkpointed on shutdown",
        wal.display()
    );

    // The data survives a restart on the same directory.
    let s = Server::start_in(s.into_dir());
    let su = s.su_token();
    assert_eq!(list(&s, "notes", "", Some(&su)).json["totalItems"], 20);
}

/// Each expanded record passes its own collection's viewRule; the records of one page are
/// expanded together, nested paths go through, unknown names are ignored (no `expand` key).
#[test]
fn expand_checks_each_related_record_and_ignores_unknown_names() {
    let s = Server::start();
    let su = s.su_token();
    let people = s.create_collection(
        &su,
        json!({"name": "people", "listRule": "", "viewRule": "public = true",
            "fields": [{"name": "name", "type": "text"}, {"name": "public", "type": "bool"}]}),
    );
    let pid = people["id"].as_str().unwrap();
    s.create_collection(
        &su,
        json!({"name": "posts", "listRule": "", "viewRule": "", "createRule": "",
            "fields": [{"name": "title", "type": "text"},
                {"name": "author", "type": "relation", "collectionId": pid, "maxSelect": 1},
                {"name": "fans", "type": "relation", "collectionId": pid, "maxSelect": 5}]}),
    );
    let mk = |name: &str, public: bool| {
        let r = s.req(
            "POST",
            "/api/collections/people/records",
            Some(&su),
            Some(&json!({"name": name, "public": public})),
        );
        r.json["id"].as_str().unwrap().to_owned()
    };
    let (ann, bob, cy) = (mk("ann", true), mk("bob", false), mk("cy", true));
    for (title, author, fans) in [
        (
            "p1",
            ann.as_str(),
            vec![cy.as_str(), bob.as_str(), ann.as_str()],
        ),
        ("p2", bob.as_str(), vec![]),
        ("p3", "", vec![]),
    ] {
        let body = json!({"title": title, "author": author, "fans": fans});
        let r = s.req("POST", "/api/collections/posts/records", None, Some(&body));
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let guest = list(&s, "posts", "sort=title&expand=author,fans,nope", None);
    let items = guest.json["items"].as_array().unwrap();
    assert_eq!(items[0]["expand"]["author"]["name"], "ann");
    let fans: Vec<&str> = items[0]["expand"]["fans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        fans,
        ["cy", "ann"],
        "stored order, bob (not viewable) left out"
    );
    assert_eq!(
        items[1]["expand"],
        json!({}),
        "bob is not viewable by a guest"
    );
    assert_eq!(items[2]["expand"], json!({}));
    let admin = list(&s, "posts", "sort=title&expand=author", Some(&su));
    assert_eq!(admin.json["items"][1]["expand"]["author"]["name"], "bob");
    let unknown = list(&s, "posts", "expand=nope,title", None);
    assert!(unknown.json["items"][0].get("expand").is_none());
    let picked = list(
        &s,
        "posts",
        "sort=title&expand=author&fields=title,expand.author.name",
        None,
    );
    assert_eq!(
        picked.json["items"][0],
        json!({"title": "p1", "expand": {"author": {"name": "ann"}}})
    );
    let back = s.req(
        "GET",
        &format!("/api/collections/people/records/{ann}?expand=posts_via_fans.author"),
        None,
        None,
    );
    assert_eq!(back.json["expand"]["posts_via_fans"][0]["title"], "p1");
    assert_eq!(
        back.json["expand"]["posts_via_fans"][0]["expand"]["author"]["name"],
        "ann"
    );
}

#[test]
fn unknown_collection_messages_per_action() {
    let s = Server::start();
    let su = s.su_token();
    let evil = "/api/collections/x%27%3Bdrop%20table%20users--/records";
    let x = json!({"title": "x"});
    let one = format!("{evil}/abc");
    // PocketBase's wording differs per action: create and update say "or invalid".
    for (m, p, msg) in [
        ("GET", evil, "Missing collection context."),
        ("GET", &one, "Missing collection context."),
        ("DELETE", &one, "Missing collection context."),
        ("POST", evil, "Missing or invalid collection context."),
        ("PATCH", &one, "Missing or invalid collection context."),
    ] {
        let r = s.req(m, p, Some(&su), (m == "POST" || m == "PATCH").then_some(&x));
        assert_eq!((r.status, r.json), (404, err(404, msg)), "{m} {p}");
    }
    assert_eq!(list(&s, "users", "", Some(&su)).status, 200);
}

#[test]
fn signup_validation_errors() {
    let s = Server::start();
    let base = "/api/collections/users/records";
    let field_err = |field: &str, code: &str, message: &str| json!({"data": {field: {"code": code, "message": message}}, "message": "Failed to create record.", "status": 400});
    for (body, want) in [
        (
            json!({"email": "bob@example.com", "password": "short", "passwordConfirm": "short"}),
            field_err(
                "password",
                "validation_min_text_constraint",
                "Must be at least 8 character(s).",
            ),
        ),
        (
            json!({"email": "not-an-email", "password": "bobpass1234", "passwordConfirm": "bobpass1234"}),
            field_err(
                "email",
                "validation_is_email",
                "Must be a valid email address.",
            ),
        ),
        (
            json!({"email": "bob@example.com", "password": "bobpass1234", "passwordConfirm": "bobpass1234", "verified": true}),
            field_err(
                "verified",
                "validation_values_mismatch",
                "Values don't match.",
            ),
        ),
    ] {
        let r = s.req("POST", base, None, Some(&body));
        assert_eq!((r.status, &r.json), (400, &want), "{body}");
    }
    assert_eq!(
        list(&s, "users", "skipTotal=0", Some(&s.su_token())).json["totalItems"],
        0
    );
}

#[test]
fn a_view_query_dry_run_shows_fields_and_rows_and_keeps_nothing() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(&su, posts_def());
    for t in ["one", "two"] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            None,
            Some(&json!({"title": t, "views": 3})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let path = "/api/collections/meta/dry-run-view";
    let r = s.req(
        "POST",
        path,
        Some(&su),
        Some(&json!({"query": "select id, title, views from posts order by title"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let names: Vec<&str> = r.json["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "title", "views"]);
    // Cloned fields keep their source's options.
    assert_eq!(r.json["fields"][1]["required"], true);
    let sample = r.json["sample"].as_array().unwrap();
    assert_eq!(sample.len(), 2);
    assert_eq!(sample[0]["title"], "one");
    assert_eq!(sample[0]["views"], 3);
    assert!(
        sample[0]["collectionName"]
            .as_str()
            .unwrap()
            .starts_with("temp_view_")
    );
    // Nothing of it stays: no new collection.
    let all = s.req("GET", "/api/collections?perPage=100", Some(&su), None);
    assert!(!all.json.to_string().contains("temp_view_"), "{}", all.json);
    assert_eq!(
        s.req(
            "POST",
            path,
            Some(&su),
            Some(&json!({"query": "select * from posts"}))
        )
        .json["message"],
        "Invalid view query. Raw error: \nwildcard columns (*) are not supported - manually type the collection field names you want the view query to have."
    );
    assert_eq!(
        s.req("POST", path, Some(&su), Some(&json!({}))).json,
        json!({"data": {"query": {"code": "validation_required", "message": "Cannot be blank."}},
               "message": "An error occurred while validating the submitted data.", "status": 400})
    );
    assert_eq!(
        s.req(
            "POST",
            path,
            None,
            Some(&json!({"query": "select id from posts"}))
        )
        .json,
        err(401, REQUIRES_AUTH)
    );
}

/// Two answers measured on PocketBase 0.40.6 that the collections differential found: a view
/// whose own query a rename left broken blocks every other delete (PocketBase tries each view's
/// query again after a delete), and an import whose index is refused answers with the index
/// errors themselves.
#[test]
fn a_broken_view_query_blocks_deletes_and_an_import_answers_with_index_errors() {
    let s = Server::start();
    let su = s.su_token();
    let o = s.create_collection(
        &su,
        json!({"name": "o1", "fields": [{"name": "secret", "type": "text"}]}),
    );
    s.create_collection(
        &su,
        json!({"name": "v1", "type": "view", "viewQuery": "SELECT id, (secret || '!') AS x FROM o1"}),
    );
    s.create_collection(&su, json!({"name": "other", "type": "base"}));
    let mut fields = o["fields"].clone();
    for f in fields.as_array_mut().unwrap() {
        if f["name"] == "secret" {
            f["name"] = json!("renamed");
        }
    }
    let r = s.req(
        "PATCH",
        "/api/collections/o1",
        Some(&su),
        Some(&json!({"fields": fields})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    // SQLite rewrote its copy of the view, so its records still read...
    assert_eq!(
        s.req("GET", "/api/collections/v1/records", Some(&su), None)
            .status,
        200
    );
    // ...but the collection's own query names a column that is gone.
    let r = s.req("DELETE", "/api/collections/other", Some(&su), None);
    assert_eq!(
        r.json,
        json!({"data": {}, "message": "Failed to delete collection.", "status": 400})
    );
    let all = s.req("GET", "/api/collections?perPage=100", Some(&su), None);
    assert!(
        all.json.to_string().contains("\"other\""),
        "nothing was deleted"
    );
    assert_eq!(
        s.req("DELETE", "/api/collections/v1", Some(&su), None)
            .status,
        204
    );
    assert_eq!(
        s.req("DELETE", "/api/collections/other", Some(&su), None)
            .status,
        204
    );

    let r = s.req(
        "PUT",
        "/api/collections/import",
        Some(&su),
        Some(&json!({"collections": [{"name": "p2", "type": "base",
            "fields": [{"name": "a", "type": "text"}],
            "indexes": ["CREATE INDEX idx_a ON p2 (nosuch)", ""]}]})),
    );
    assert_eq!(
        r.json,
        json!({"data": {"indexes": {
                "0": {"code": "validation_invalid_index_expression",
                      "message": "Failed to create index idx_a - SQL logic error: no such column: nosuch (1)."},
                "1": {"code": "validation_invalid_index_expression",
                      "message": "Invalid CREATE INDEX expression."}}},
               "message": "Failed to import collections.", "status": 400})
    );
    let all = s.req("GET", "/api/collections?perPage=100", Some(&su), None);
    assert!(
        !all.json.to_string().contains("\"p2\""),
        "the import left nothing"
    );
}

/// A request's raw bytes on a new connection; the status and the body.
fn raw_request(s: &Server, head: &[u8]) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(&s.addr).expect("connect");
    c.write_all(head).expect("write");
    let mut got = Vec::new();
    c.read_to_end(&mut got).expect("read");
    let text = String::from_utf8_lossy(&got);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn raw_quotes_angle_brackets_and_utf8_in_the_target_are_read_as_pocketbase_reads_them() {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(&su, posts_def());
    for (t, v) in [("a\"b", 1), ("é", 5), ("plain", 9)] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": t, "views": v})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let get = |target: &str| {
        raw_request(
            &s,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    let cases: [(&str, &[&str]); 5] = [
        ("views>3%26%26views<9", &["é"]),
        ("title=\"é\"", &["é"]),
        ("title!=\"plain\"", &["a\"b", "é"]),
        ("title~'\\\"'", &["a\"b"]),
        ("views>=1", &["a\"b", "é", "plain"]),
    ];
    for (filter, want) in cases {
        let (status, body) = get(&format!(
            "/api/collections/posts/records?filter={filter}&sort=views"
        ));
        assert_eq!(status, 200, "{filter}: {body}");
        let got: Vec<&str> = body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["title"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(got, want, "{filter}");
    }
    // A filter that is wrong stays PocketBase's 400 with its body, not an empty one.
    let (status, body) = get("/api/collections/posts/records?filter=title=`x`");
    assert_eq!(status, 400);
    assert_eq!(
        body["message"], "Something went wrong while processing your request.",
        "{body}"
    );
    // Raw bytes in the path: the route still answers, with PocketBase's 404 body.
    let (status, body) = get("/api/collections/posts/records/<nope>");
    assert_eq!(status, 404);
    assert_eq!(body["status"], 404, "{body}");
}

/// A body sent with a read, a delete or an auth refresh is read as PocketBase's request info
/// reads it before its rule check, and a sign-in's as its form binding reads it: every pairing
/// of method, Content-Type, body and framing (length or chunked) is answered alike by both
/// servers.
#[test]
fn bodies_sent_with_reads_deletes_and_refreshes_are_answered_as_by_the_reference() {
    let Some(reference) = crate::common::reference_bin() else {
        return;
    };
    let reference = reference.to_str().expect("utf-8").to_owned();
    let (r, f) = std::thread::scope(|sc| {
        let a = sc.spawn(|| Server::start_bin(&reference));
        let b = sc.spawn(Server::start);
        (a.join().unwrap(), b.join().unwrap())
    });
    let tokens: Vec<String> = [&r, &f]
        .iter()
        .map(|s| {
            let su = s.su_token();
            s.create_collection(
                &su,
                json!({"name": "posts", "type": "base", "listRule": "", "viewRule": "",
                    "fields": [{"name": "title", "type": "text"}]}),
            );
            su
        })
        .collect();
    let targets = [
        ("GET", "/api/collections/posts/records", false),
        // Query pairs Go refuses are dropped, so these lists are plain ones.
        ("GET", "/api/collections/posts/records?filter=%zz", false),
        (
            "GET",
            "/api/collections/posts/records?filter=title%3D1;x",
            false,
        ),
        (
            "GET",
            "/api/collections/_superusers/records?perPage=%4&page=2",
            true,
        ),
        // A body bound for a sign-in (none of these signs in): a form or multipart one also
        // fails on a query pair Go refuses.
        (
            "POST",
            "/api/collections/_superusers/auth-with-password",
            false,
        ),
        (
            "POST",
            "/api/collections/_superusers/auth-with-password?x=%zz",
            false,
        ),
        ("GET", "/api/collections/posts/records/nope", false),
        ("DELETE", "/api/collections/posts/records/nope", false),
        ("GET", "/api/collections/nothing/records", false),
        ("POST", "/api/collections/_superusers/auth-refresh", true),
        ("POST", "/api/collections/_superusers/auth-refresh", false),
    ];
    let types = [
        Some("application/json"),
        Some("application/json; charset=utf-8"),
        Some("text/plain"),
        None,
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=xx"),
    ];
    let bodies = [
        "", "{}", "[1]", "null", "{bad", "   ", "a=%zz", "a=1;b=2", "a=%4", "garbage", "\"x\"",
    ];
    let mut diffs = Vec::new();
    let mut n = 0;
    for (method, path, su) in targets {
        for ct in types {
            for body in bodies {
                for chunked in [false, true] {
                    if chunked && body.is_empty() {
                        continue;
                    }
                    n += 1;
                    let answers: Vec<(u16, Value)> = [&r, &f]
                        .iter()
                        .zip(&tokens)
                        .map(|(s, token)| {
                            let mut head = format!(
                                "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            );
                            if let Some(ct) = ct {
                                head.push_str(&format!("Content-Type: {ct}\r\n"));
                            }
                            if su {
                                head.push_str(&format!("Authorization: {token}\r\n"));
                            }
                            let framed = if chunked {
                                head.push_str("Transfer-Encoding: chunked\r\n\r\n");
                                format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len())
                            } else {
                                head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
                                body.to_owned()
                            };
                            let (status, body) =
                                raw_request(s, format!("{head}{framed}").as_bytes());
                            (status, made_masked(body))
                        })
                        .collect();
                    if answers[0] != answers[1] {
                        diffs.push(format!(
                            "{method} {path} su={su} {ct:?} {body:?} chunked={chunked}:\n  pocketbase {:?}\n  ferrobase  {:?}",
                            answers[0], answers[1]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {n} differ:\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `v` with the values each server makes for itself (ids, tokens, dates) masked.
fn made_masked(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match v {
                    Value::String(_) if ["id", "token", "created", "updated"].contains(&&*k) => {
                        (k, json!("<made>"))
                    }
                    v => (k, made_masked(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(made_masked).collect()),
        v => v,
    }
}
