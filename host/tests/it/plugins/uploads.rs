//! Before-hooks see the uploads a write is about to attach (WIT 0.1.3, `call-context.uploads`):
//! the `upload-guard` example refuses files by size, detected type and client name, with a
//! field error on the file's field, and nothing of a refused write is stored.

use super::{server_with, wait_loaded};
use crate::common::Server;
use crate::files::{multipart, send, temp_uploads};
use crate::s3::count_files;
use serde_json::{Value, json};

const TOML: &str = r#"
[plugins.upload-guard]
grants = []
[plugins.upload-guard.config]
max_bytes = "64"
allowed_types = "text/plain; charset=utf-8, image/png"
blocked_extensions = "exe, BAT"
"#;

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n";

fn field_error(r: &crate::common::Resp, field: &str) -> (String, String) {
    let e = &r.json["data"][field];
    (
        e["code"].as_str().unwrap_or_default().to_owned(),
        e["message"].as_str().unwrap_or_default().to_owned(),
    )
}

fn stored_files(s: &Server, collection_id: &str) -> usize {
    count_files(&s.data_dir().join("storage").join(collection_id))
}

#[test]
fn a_before_hook_sees_the_pending_uploads_and_can_refuse_one() {
    let Some(s) = server_with(&["upload_guard", "contract_0_1_0"], TOML) else {
        return;
    };
    let su = s.su_token();
    let docs = s.create_collection(
        &su,
        json!({"name": "documents", "type": "base",
        "listRule": "", "viewRule": "", "createRule": "", "updateRule": "",
        "fields": [
            {"name": "title", "type": "text"},
            {"name": "doc", "type": "file", "maxSelect": 1, "maxSize": 1_000_000},
            {"name": "pics", "type": "file", "maxSelect": 5, "maxSize": 1_000_000}
        ]}),
    );
    let cid = docs["id"].as_str().unwrap().to_owned();
    // The 0.1.0 fixture still loads beside a 0.1.3 one (it needs `posts`).
    super::posts_schema(&s, &su, json!(""));
    let report = wait_loaded(&s, &su, &["contract-0-1-0", "upload-guard"]);
    assert_eq!(
        super::entry(&report, "upload_guard.wasm")["error"],
        Value::Null
    );
    let path = "/api/collections/documents/records";

    // Allowed: small, of an allowed type (detected from the bytes, whatever the name says).
    let r = send(
        &s,
        "POST",
        path,
        &su,
        multipart(
            &[("title", "ok")],
            &[
                ("doc", "notes.txt", b"plain words"),
                ("pics", "dot.png", PNG),
            ],
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_owned();
    assert_eq!(stored_files(&s, &cid), 4, "two files and their .attrs");

    // Too big: the hook sees the size; PocketBase's body with the hook's field error.
    let big = vec![b'a'; 65];
    let r = send(
        &s,
        "POST",
        path,
        &su,
        multipart(&[], &[("doc", "big.txt", &big)]),
    );
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(r.json["message"], "Failed to create record.");
    let (code, msg) = field_error(&r, "doc");
    assert_eq!(code, "validation_upload_refused");
    assert_eq!(msg, "big.txt is 65 bytes; the limit is 64 bytes.");

    // A PDF named .png: the hook sees the detected type, not the name's.
    // A blocked extension on text: the hook sees the client's name.
    // Both fields refused at once, each with its own error.
    let r = send(
        &s,
        "POST",
        path,
        &su,
        multipart(
            &[],
            &[
                ("pics", "ok.png", PNG),
                ("pics", "fake.png", PDF),
                ("doc", "run.EXE", b"echo hi"),
            ],
        ),
    );
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(
        field_error(&r, "pics"),
        (
            "validation_upload_refused".to_owned(),
            "fake.png is application/pdf, which is not allowed.".to_owned()
        )
    );
    let (_, msg) = field_error(&r, "doc");
    assert!(
        msg.starts_with("run.EXE") && msg.contains(".EXE files"),
        "{msg}"
    );

    // An update appending a refused file: the update's message, the record unchanged.
    let r = send(
        &s,
        "PATCH",
        &format!("{path}/{id}"),
        &su,
        multipart(&[], &[("pics+", "more.bat", b"echo")]),
    );
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(r.json["message"], "Failed to update record.");
    assert_eq!(field_error(&r, "pics").0, "validation_upload_refused");
    let got = s.req("GET", &format!("{path}/{id}"), Some(&su), None);
    assert_eq!(
        got.json["pics"].as_array().map(Vec::len),
        Some(1),
        "{}",
        got.json
    );

    // An update adding an allowed file goes through; a write without files is not looked at.
    let r = send(
        &s,
        "PATCH",
        &format!("{path}/{id}"),
        &su,
        multipart(&[], &[("pics+", "second.png", PNG)]),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["pics"].as_array().map(Vec::len), Some(2));
    let r = s.req("POST", path, Some(&su), Some(&json!({"title": "no files"})));
    assert_eq!(r.status, 200, "{}", r.json);

    // Nothing of the refused writes was stored or left behind.
    assert_eq!(stored_files(&s, &cid), 6, "three files and their .attrs");
    assert_eq!(temp_uploads(&s), 0);
    let all = s.req("GET", &format!("{path}?perPage=50"), Some(&su), None);
    assert_eq!(all.json["totalItems"], 2, "{}", all.json);
}
