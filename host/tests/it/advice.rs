//! Index advice (`[advisor]`): record lists scanning past the threshold are listed at
//! `GET /api/collections/meta/index-advice` with the index that would serve them, applying one
//! through a collection update stops them scanning, and indexes made outside a collection's
//! `indexes` survive its updates as they do in PocketBase.

use crate::common::{Server, enc, reference_and_subject};
use serde_json::{Value, json};

const ADVICE: &str = "/api/collections/meta/index-advice";

/// A ferrobase server whose advisor records lists past 20 rows scanned, with `posts` (public
/// list rule) holding 60 records.
fn seeded() -> (Server, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pb.toml"),
        "[advisor]\nscan_threshold = 20\n",
    )
    .unwrap();
    let s = Server::start_in(dir);
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "posts", "type": "base", "listRule": "",
            "fields": [{"name": "title", "type": "text"}, {"name": "views", "type": "number"},
                {"name": "created", "type": "autodate", "onCreate": true}]}),
    );
    for i in 0..60 {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": format!("post {i}"), "views": i * 10})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    (s, su)
}

fn list(s: &Server, token: Option<&str>, query: &str) {
    let r = s.req(
        "GET",
        &format!("/api/collections/posts/records?{query}"),
        token,
        None,
    );
    assert_eq!(r.status, 200, "{query}: {}", r.json);
}

fn advice(s: &Server, su: &str) -> Vec<Value> {
    let r = s.req("GET", ADVICE, Some(su), None);
    assert_eq!(r.status, 200, "{}", r.json);
    r.json.as_array().expect("a list").clone()
}

/// The entry of the shape with this filter and sort.
fn entry(all: &[Value], filter: &str, sort: &str) -> Option<Value> {
    all.iter()
        .find(|e| e["filter"] == filter && e["sort"] == sort)
        .cloned()
}

/// `ferrobase_index_advice_scans` of `posts`, from the superusers' metrics.
fn scans_metric(s: &Server, su: &str) -> u64 {
    s.metric(
        su,
        "ferrobase_index_advice_scans_total{collection=\"posts\"}",
    )
}

#[test]
fn lists_past_the_threshold_are_advised_and_the_applied_index_stops_them() {
    let (s, su) = seeded();

    // Under the threshold: a page of 5 without a sort steps through 5 rows (the count has no
    // WHERE, so SQLite counts it from the b-tree without a scan step).
    list(&s, None, "perPage=5");
    list(&s, None, &format!("perPage=5&filter={}", enc("id='nope'")));
    assert!(advice(&s, &su).is_empty(), "{:?}", advice(&s, &su));
    assert_eq!(scans_metric(&s, &su), 0);

    // `sort=-created` scans every row to sort them; two pages of it (distinct query strings,
    // so the response cache answers neither) are one shape.
    list(&s, None, "sort=-created&perPage=5");
    list(&s, Some(&su), "sort=-created&perPage=6");
    list(
        &s,
        None,
        &format!("sort=-views&filter={}", enc("views>100 && title~'post'")),
    );
    list(
        &s,
        None,
        &format!("sort=-views&filter={}", enc("views > 250 && title ~ \"1\"")),
    );
    // A cached answer runs no statement: not counted again.
    list(&s, None, "sort=-created&perPage=5");

    let all = advice(&s, &su);
    assert_eq!(all.len(), 2, "{all:#?}");
    let sorted = entry(&all, "", "-created").expect("sort=-created advised");
    assert_eq!(sorted["collection"], "posts");
    assert_eq!(sorted["count"], 2);
    // SQLite counts the steps forward of a scan: one less than its 60 rows.
    assert_eq!(sorted["rowsScanned"], 59);
    assert_eq!(sorted["sorted"], true);
    assert_eq!(
        sorted["index"],
        "CREATE INDEX `idx_posts_created` ON `posts` (`created`)"
    );
    let plan = sorted["plan"].as_array().unwrap();
    assert!(
        plan.iter()
            .any(|l| l.as_str().unwrap().contains("SCAN posts")),
        "{plan:?}"
    );
    assert!(sorted["totalMs"].as_f64().unwrap() > 0.0);
    let filtered = entry(&all, "views > ? && title ~ ?", "-views").expect("filter advised");
    assert_eq!(filtered["count"], 2);
    assert_eq!(
        filtered["index"],
        "CREATE INDEX `idx_posts_views` ON `posts` (`views`)"
    );
    assert!(
        filtered["note"].as_str().unwrap().contains("LIKE"),
        "{filtered}"
    );
    // Sorted by total time, the most first.
    assert!(all[0]["totalMs"].as_f64() >= all[1]["totalMs"].as_f64());
    assert_eq!(scans_metric(&s, &su), 4);

    // Applying it is a normal collection update adding the entry to `indexes`.
    let index = sorted["index"].as_str().unwrap();
    let r = s.req(
        "PATCH",
        "/api/collections/posts",
        Some(&su),
        Some(&json!({"indexes": [index]})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["indexes"], json!([index]));
    list(&s, None, "sort=-created&perPage=7");
    list(&s, None, "sort=-created&perPage=8");
    let all = advice(&s, &su);
    let sorted = entry(&all, "", "-created").unwrap();
    assert_eq!(sorted["count"], 2, "no longer recorded: {sorted}");
    assert_eq!(sorted["index"], Value::Null);
    assert!(
        sorted["note"]
            .as_str()
            .unwrap()
            .contains("idx_posts_created"),
        "{sorted}"
    );
    assert_eq!(scans_metric(&s, &su), 4);

    // DELETE forgets.
    assert_eq!(s.req("DELETE", ADVICE, Some(&su), None).status, 204);
    assert!(advice(&s, &su).is_empty());
}

#[test]
fn advice_is_for_superusers_only_as_pocketbase_answers_its_meta_routes() {
    let (s, su) = seeded();
    let r = s.req(
        "POST",
        "/api/collections/users/records",
        None,
        Some(&json!({"email": "a@example.com", "password": "12345678aA", "passwordConfirm": "12345678aA"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let user = s.login("users", "a@example.com", "12345678aA").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    for (token, status) in [(None, 401), (Some(user.as_str()), 403)] {
        for method in ["GET", "DELETE"] {
            let got = s.req(method, ADVICE, token, None);
            let want = s.req("GET", "/api/collections/meta/scaffolds", token, None);
            assert_eq!(got.status, status, "{method} {:?}", got.json);
            assert_eq!(got.json, want.json, "{method}");
        }
    }
    assert_eq!(s.req("GET", ADVICE, Some(&su), None).status, 200);
}

/// The indexes SQLite holds on `table`, by name (auto indexes aside).
fn indexes_on(s: &Server, table: &str) -> Vec<String> {
    let db = rusqlite::Connection::open(s.data_dir().join("data.db")).unwrap();
    let mut st = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL ORDER BY name")
        .unwrap();
    st.query_map([table], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// What becomes of an index made in SQLite outside the collection's `indexes` through a rule
/// change, a field added, the declared indexes changed, the collection renamed: PocketBase
/// 0.40.6 keeps it (and drops only what `indexes` declared before), and so does ferrobase.
#[test]
fn indexes_made_outside_a_collection_survive_its_updates_as_in_pocketbase() {
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let mut seen = Vec::new();
    for s in [&reference, &subject] {
        let su = s.su_token();
        let c = s.create_collection(
            &su,
            json!({"name": "posts", "type": "base",
                "fields": [{"name": "title", "type": "text"}, {"name": "views", "type": "number"}],
                "indexes": ["CREATE INDEX idx_declared ON posts (title)"]}),
        );
        let db = rusqlite::Connection::open(s.data_dir().join("data.db")).unwrap();
        db.execute_batch("CREATE INDEX idx_foreign ON posts (views)")
            .unwrap();
        drop(db);
        let mut fields = c["fields"].as_array().unwrap().clone();
        fields.push(json!({"name": "extra", "type": "text"}));
        let steps = [
            json!({"listRule": ""}),
            json!({"fields": fields}),
            json!({"indexes": ["CREATE INDEX idx_views ON posts (views)"]}),
            json!({"name": "posts2"}),
        ];
        let mut after = Vec::new();
        for (i, body) in steps.iter().enumerate() {
            let r = s.req("PATCH", "/api/collections/posts", Some(&su), Some(body));
            assert_eq!(r.status, 200, "{body}: {}", r.json);
            let table = if i == 3 { "posts2" } else { "posts" };
            after.push(indexes_on(s, table));
        }
        // A field a foreign index covers cannot be deleted (SQLite refuses the DROP COLUMN).
        let c = s
            .req("GET", "/api/collections/posts2", Some(&su), None)
            .json;
        let fields: Vec<Value> = c["fields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"] != "views")
            .cloned()
            .collect();
        let r = s.req(
            "PATCH",
            "/api/collections/posts2",
            Some(&su),
            Some(&json!({"fields": fields, "indexes": []})),
        );
        after.push(vec![r.status.to_string()]);
        seen.push(after);
    }
    assert_eq!(
        seen[1], seen[0],
        "ferrobase (left) and PocketBase (right) after each update"
    );
    assert_eq!(
        seen[0],
        vec![
            vec!["idx_declared", "idx_foreign"],
            vec!["idx_declared", "idx_foreign"],
            vec!["idx_foreign", "idx_views"],
            vec!["idx_foreign", "idx_views"],
            vec!["400"],
        ]
    );
}

/// A user's list under an owner rule: the rule's `=` on `owner` leads the suggested index, and
/// the entry shows the rule it was advised with; a superuser's list of the same shape is
/// advised without it.
#[test]
fn the_list_rule_that_applied_counts_for_the_advice() {
    let (s, su) = seeded();
    s.create_collection(
        &su,
        json!({"name": "notes", "type": "base",
            "listRule": "owner = @request.auth.id", "createRule": "",
            "fields": [{"name": "owner", "type": "text"}, {"name": "body", "type": "text"},
                {"name": "created", "type": "autodate", "onCreate": true}]}),
    );
    for i in 0..40 {
        let r = s.req(
            "POST",
            "/api/collections/notes/records",
            Some(&su),
            Some(&json!({"owner": format!("u{}", i % 4), "body": "x"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    s.create_collection(
        &su,
        json!({"name": "people", "type": "auth", "createRule": "", "passwordAuth": {"enabled": true}}),
    );
    let r = s.req(
        "POST",
        "/api/collections/people/records",
        None,
        Some(&json!({"email": "p@example.com", "password": "1234567890", "passwordConfirm": "1234567890"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let user = s.login("people", "p@example.com", "1234567890").json["token"]
        .as_str()
        .expect("a token")
        .to_owned();
    let list_notes = |token: &str| {
        let r = s.req(
            "GET",
            "/api/collections/notes/records?sort=-created",
            Some(token),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.json);
    };
    list_notes(&user);
    list_notes(&su);
    let all = advice(&s, &su);
    let of_notes: Vec<&Value> = all.iter().filter(|e| e["collection"] == "notes").collect();
    let by_user = of_notes
        .iter()
        .find(|e| e["rule"] == "owner = @request.auth.id")
        .unwrap_or_else(|| panic!("no entry with the rule: {of_notes:?}"));
    assert_eq!(by_user["sort"], "-created");
    assert_eq!(
        by_user["index"],
        "CREATE INDEX `idx_notes_owner_created` ON `notes` (\n  `owner`,\n  `created`\n)",
        "{by_user}"
    );
    let by_su = of_notes
        .iter()
        .find(|e| e["rule"] == "")
        .unwrap_or_else(|| panic!("no entry without a rule: {of_notes:?}"));
    assert_eq!(
        by_su["index"], "CREATE INDEX `idx_notes_created` ON `notes` (`created`)",
        "{by_su}"
    );
}
