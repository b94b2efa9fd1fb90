//! The records area on its own, without HTTP: real writes on a real store (a temp dir), each
//! refusal shown leaving nothing behind, and the rule decision applied per caller kind.

use super::read;
use super::*;
use crate::config::PluginsConfig;
use crate::schema::Collection;
use crate::schema::define::build;
use crate::store::{StoreConfig, ddl};
use serde_json::json;
use tempfile::TempDir;

struct Fixture {
    _dir: TempDir,
    records: Records,
    notes: Arc<Collection>,
}

/// A store with one base collection `notes` (a required `title`) whose rules are `rules`.
async fn fixture(rules: serde_json::Value) -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("pb_data");
    let cfg = StoreConfig {
        mmap_mib: 0,
        cache_size_kib: 2000,
        journal_size_limit: 1 << 20,
        wal_autocheckpoint: 1_000,
        busy_timeout_ms: 5000,
        n_readers: 2,
        synchronous: crate::config::Synchronous::Normal,
    };
    let store = Arc::new(Store::open(&data, &cfg).expect("store"));
    let plugins = crate::plugins::Plugins::start(
        PluginsConfig::default(),
        dir.path().join("plugins"),
        None,
        data,
        Arc::clone(&store),
    )
    .await
    .expect("plugins");
    let mut def = json!({"name": "notes", "type": "base",
        "fields": [{"name": "title", "type": "text", "required": true}]});
    for (k, v) in rules.as_object().expect("rules object") {
        def[k] = v.clone();
    }
    let c = build(&def, None, &store.schema()).expect("definition");
    store
        .write_schema(move |tx| ddl::create_collection(tx, &c))
        .await
        .expect("create collection");
    let notes = Arc::clone(store.schema().by_name("notes").expect("notes"));
    let files = Arc::new(crate::files::Storage::open(dir.path()).expect("storage"));
    Fixture {
        _dir: dir,
        records: Records {
            store,
            plugins,
            feed: Default::default(),
            files,
            advisor: Arc::new(super::advice::Advisor::new(Default::default())),
        },
        notes,
    }
}

fn body(v: serde_json::Value) -> Map<String, Value> {
    v.as_object().expect("object").clone()
}

/// The titles of every note, read as the system (no rule applies).
async fn titles(f: &Fixture) -> Vec<String> {
    let system = Access::system(0);
    let sel = read::list_select(
        &f.records.store.schema(),
        &f.notes,
        &system,
        None,
        Some("title"),
    )
    .expect("list statement");
    let page = read::page(
        &f.records.store,
        &f.notes,
        sel,
        (1, 100),
        false,
        None,
        None,
        None,
    )
    .await
    .expect("page");
    page.rows
        .iter()
        .map(|r| f.notes.stored_text(r, "title").to_owned())
        .collect()
}

fn guest() -> Access<'static> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    Access::request(None, "POST", "", &(), &EMPTY, None)
}

#[tokio::test]
async fn a_null_rule_keeps_guests_out_and_the_system_in() {
    let f = fixture(json!({"createRule": null, "deleteRule": null})).await;
    let g = guest();
    let refused = Writer::new(&f.records, &g)
        .create(&f.notes, &body(json!({"title": "guest"})))
        .await;
    assert!(matches!(refused, Err(RecordError::SuperusersOnly)));
    let system = Access::system(0);
    let saved = Writer::new(&f.records, &system)
        .create(&f.notes, &body(json!({"title": "system"})))
        .await
        .expect("the system writes whatever the rule");
    assert_eq!(titles(&f).await, ["system"]);
    let id = f.notes.stored_text(&saved, "id").to_owned();
    let refused = Writer::new(&f.records, &g)
        .delete(&f.notes, id.clone())
        .await;
    assert!(matches!(refused, Err(RecordError::SuperusersOnly)));
    assert_eq!(
        titles(&f).await,
        ["system"],
        "a refused delete deletes nothing"
    );
    Writer::new(&f.records, &system)
        .delete(&f.notes, id.clone())
        .await
        .expect("system delete");
    assert!(titles(&f).await.is_empty());
    let again = Writer::new(&f.records, &system).delete(&f.notes, id).await;
    assert!(matches!(again, Err(RecordError::NotFound)));
}

#[tokio::test]
async fn an_expression_rule_is_checked_against_the_written_row_and_rolls_it_back() {
    let f = fixture(json!({"createRule": "title ~ 'ok'", "updateRule": "title ~ 'ok'"})).await;
    let g = guest();
    let w = Writer::new(&f.records, &g);
    let kept = w
        .create(&f.notes, &body(json!({"title": "ok one"})))
        .await
        .expect("passes the rule");
    let refused = w.create(&f.notes, &body(json!({"title": "nope"}))).await;
    assert!(
        matches!(
            refused,
            Err(RecordError::Refused(_) | RecordError::Invalid { .. })
        ),
        "a create the rule does not admit is refused"
    );
    assert_eq!(titles(&f).await, ["ok one"], "and leaves no row");
    // An update must pass the rule on the stored record (here it does), then the new values
    // are written.
    let id = f.notes.stored_text(&kept, "id").to_owned();
    w.update(&f.notes, id.clone(), &body(json!({"title": "ok two"})))
        .await
        .expect("update");
    assert_eq!(titles(&f).await, ["ok two"]);
    let missing = w
        .update(&f.notes, "x".repeat(15), &body(json!({"title": "ok"})))
        .await;
    assert!(matches!(missing, Err(RecordError::NotFound)));
}

#[tokio::test]
async fn invalid_input_names_its_fields_and_writes_nothing() {
    let f = fixture(json!({"createRule": ""})).await;
    let g = guest();
    let w = Writer::new(&f.records, &g);
    match w.create(&f.notes, &body(json!({"title": ""}))).await {
        Err(RecordError::Invalid { data, .. }) => {
            assert_eq!(data["title"]["code"], "validation_required", "{data:?}");
        }
        other => panic!("expected a validation error, got {:?}", other.err()),
    }
    let id_taken = w
        .create(&f.notes, &body(json!({"title": "a"})))
        .await
        .expect("create");
    let id = f.notes.stored_text(&id_taken, "id").to_owned();
    match w
        .create(&f.notes, &body(json!({"id": id, "title": "b"})))
        .await
    {
        Err(RecordError::Invalid { data, .. }) => {
            assert_eq!(data["id"]["code"], "validation_not_unique", "{data:?}");
        }
        other => panic!("expected the id to be refused, got {:?}", other.err()),
    }
    assert_eq!(titles(&f).await, ["a"]);
}

#[tokio::test]
async fn views_are_refused_for_every_write() {
    let f = fixture(json!({"createRule": ""})).await;
    let def = json!({"name": "v", "type": "view", "viewQuery": "select id, title from notes",
        "listRule": ""});
    let schema = f.records.store.schema();
    let mut c = build(&def, None, &schema).expect("view definition");
    let store = Arc::clone(&f.records.store);
    f.records
        .store
        .write_schema(move |tx| {
            c.fields = ddl::infer_view_fields(tx, &store.schema(), c.view_query())?;
            ddl::create_collection(tx, &c)
        })
        .await
        .expect("create view");
    let v = Arc::clone(f.records.store.schema().by_name("v").expect("v"));
    let system = Access::system(0);
    let w = Writer::new(&f.records, &system);
    let r = w.create(&v, &body(json!({"title": "x"}))).await;
    assert!(matches!(r, Err(RecordError::Refused(_))));
    let r = w.delete(&v, "x".repeat(15)).await;
    assert!(matches!(r, Err(RecordError::Refused(_))));
}

#[tokio::test]
async fn a_password_bcrypt_refuses_ends_a_guest_create_before_its_field_errors() {
    // PocketBase hashes a password as it loads the body; a non-superuser's create then exports
    // the would-be record to check the create rule and the hash's error answers alone.
    let f = fixture(json!({"createRule": "", "fields": [
        {"name": "title", "type": "text", "required": true},
        {"name": "pw", "type": "password", "cost": 4}]}))
    .await;
    let long = "é".repeat(40); // 80 bytes, 40 characters
    let g = guest();
    let refused = Writer::new(&f.records, &g)
        .create(&f.notes, &body(json!({"title": "", "pw": long})))
        .await;
    assert!(
        matches!(refused, Err(RecordError::Refused(MSG_CREATE_FAILED))),
        "{refused:?}"
    );
    let system = Access::system(0);
    match Writer::new(&f.records, &system)
        .create(&f.notes, &body(json!({"title": "", "pw": long})))
        .await
    {
        Err(RecordError::Invalid { data, .. }) => {
            assert_eq!(data["pw"]["code"], "validation_invalid_value");
            assert_eq!(data["title"]["code"], "validation_required");
        }
        other => panic!("the system sees the field errors: {other:?}"),
    }
    let short = "é".repeat(36); // 72 bytes: bcrypt takes it
    Writer::new(&f.records, &g)
        .create(&f.notes, &body(json!({"title": "t", "pw": short})))
        .await
        .expect("72 bytes hash");
    assert_eq!(titles(&f).await, ["t"]);
}

#[tokio::test]
async fn a_single_file_field_checks_only_the_last_name_it_is_given() {
    let f = fixture(json!({"createRule": "", "fields": [
        {"name": "title", "type": "text", "required": true},
        {"name": "doc", "type": "file", "maxSelect": 1},
        {"name": "pics", "type": "file", "maxSelect": 3}]}))
    .await;
    let g = guest();
    let w = Writer::new(&f.records, &g);
    let sent = json!({"title": "t", "doc": [1, "a", null], "pics": [1, "a", null]});
    match w.create(&f.notes, &body(sent)).await {
        Err(RecordError::Invalid { data, .. }) => {
            // PocketBase keeps a single-file field's last name before it checks the names.
            assert_eq!(
                data["doc"]["params"]["invalidFiles"],
                json!(["a"]),
                "{data:?}"
            );
            assert_eq!(
                data["pics"]["params"]["invalidFiles"],
                json!(["1", "a"]),
                "{data:?}"
            );
        }
        other => panic!("expected a validation error, got {:?}", other.err()),
    }
}
