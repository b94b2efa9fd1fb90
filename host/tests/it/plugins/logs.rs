//! A plugin's `log.write` lines become `_logs` rows: PocketBase's level numbers, the message,
//! the fields and the plugin's name in `data`, under `logs.minLevel` and `logs.maxDays`, and
//! found by the logs API's filters.

use super::{GRANTS, eventually, posts_schema, server_with, wait_loaded};
use crate::common::{Server, enc};
use serde_json::{Value, json};

/// The `_logs` rows the filter selects, newest first.
fn logs(s: &Server, su: &str, filter: &str) -> Vec<Value> {
    let r = s.req(
        "GET",
        &format!("/api/logs?perPage=100&sort=-created&filter={}", enc(filter)),
        Some(su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["items"].as_array().unwrap().clone()
}

fn set_logs(s: &Server, su: &str, logs: Value) {
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(&json!({"logs": logs})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
}

/// Run the cleanup job once and wait until it has finished (its line is queued by then).
fn run_cleanup(s: &Server, su: &str, runs: u64) {
    for title in ["d1", "d2"] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            None,
            Some(&json!({"title": title, "status": "draft"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let r = s.req("POST", "/api/crons/cleanup_drafts", Some(su), None);
    assert_eq!(r.status, 204, "{}", r.json);
    eventually("the cleanup job to finish", || {
        let r = s.req("GET", "/api/cleanup/stats", None, None);
        (r.json["runs"] == runs).then_some(())
    });
}

/// Every row queued so far is written: a refused request (level 8, kept under any minLevel up
/// to 8) is queued after them, and rows are written in queue order.
fn written(s: &Server, su: &str, marker: &str) {
    let r = s.req(
        "GET",
        &format!("/api/collections/{marker}/records"),
        None,
        None,
    );
    assert_eq!(r.status, 404);
    eventually("the marker row", || {
        (!logs(s, su, &format!("data.url ~ '{marker}'")).is_empty()).then_some(())
    });
}

#[test]
fn plugin_log_lines_are_log_rows_with_the_plugins_name_under_the_log_settings() {
    let Some(s) = server_with(&["cleanup"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    wait_loaded(&s, &su, &["cleanup"]);
    let mine = "data.plugin = 'cleanup'";

    // Above the line's level (info): no row.
    set_logs(&s, &su, json!({"maxDays": 5, "minLevel": 4}));
    run_cleanup(&s, &su, 1);
    written(&s, &su, "marker_one");
    assert_eq!(logs(&s, &su, mine), Vec::<Value>::new());

    // Logs off (maxDays 0): no row either.
    set_logs(&s, &su, json!({"maxDays": 0, "minLevel": 0}));
    run_cleanup(&s, &su, 2);
    set_logs(&s, &su, json!({"maxDays": 5}));
    written(&s, &su, "marker_two");
    assert_eq!(logs(&s, &su, mine), Vec::<Value>::new());

    // At the line's level: one row, as PocketBase stores a hook's `logger().info(msg, k, v)`.
    run_cleanup(&s, &su, 3);
    let rows = eventually("the plugin's row", || {
        let rows = logs(&s, &su, mine);
        (!rows.is_empty()).then_some(rows)
    });
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["level"], 0);
    assert_eq!(row["message"], "deleted 2 draft posts");
    assert_eq!(row["data"], json!({"deleted": "2", "plugin": "cleanup"}));
    assert_eq!(row["id"].as_str().map(str::len), Some(15), "{row}");

    // The API's filters reach the plugin's fields, and the row reads alone.
    assert_eq!(
        logs(
            &s,
            &su,
            "data.plugin = 'cleanup' && data.deleted = '2' && level = 0"
        )
        .len(),
        1
    );
    assert!(logs(&s, &su, "data.plugin = 'audit'").is_empty());
    assert!(logs(&s, &su, "data.plugin = 'cleanup' && level > 0").is_empty());
    let one = s.req(
        "GET",
        &format!("/api/logs/{}", row["id"].as_str().unwrap()),
        Some(&su),
        None,
    );
    assert_eq!(one.status, 200, "{}", one.json);
    assert_eq!(&one.json, row);
}
