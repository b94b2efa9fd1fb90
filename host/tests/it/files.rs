//! File fields against the reference: multipart uploads, stored names, the `.attrs` sidecar,
//! validation errors, downloads with their headers, ranges and conditional GETs, replacement
//! and deletion removing bytes from disk. Each step runs on both servers and is compared.

use crate::common::{Server, reference_and_subject};
use serde_json::{Value, json};
use std::time::Duration;

const BOUNDARY: &str = "----ferrobase-files-test";

/// A multipart body of text values and files (part name, file name, bytes).
fn multipart(values: &[(&str, &str)], files: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (k, v) in values {
        b.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    for (k, name, bytes) in files {
        b.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        b.extend_from_slice(bytes);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    b
}

fn send(s: &Server, method: &str, path: &str, su: &str, body: Vec<u8>) -> crate::common::Resp {
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    s.raw(method, path, Some(su), Some((&ct, &body)))
}

/// A download: status, headers (lowercase names) and raw bytes.
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    bytes: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn fetch(s: &Server, path: &str, headers: &[(&str, &str)]) -> Got {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut rb = agent.get(format!("http://{}{}", s.addr, path));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let mut res = rb.call().expect("download");
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    Got {
        status: res.status().as_u16(),
        headers,
        bytes: res.body_mut().read_to_vec().unwrap_or_default(),
    }
}

/// A stored name with its random part(s) masked.
fn mask(name: &str) -> String {
    let re = regex::Regex::new("[a-z0-9]{10,}").unwrap();
    let (base, ext) = name.split_at(name.find('.').unwrap_or(name.len()));
    let cut = base.rfind('_').expect("random suffix");
    format!("{}_R{ext}", re.replace_all(&base[..cut], "R"))
}

/// The headers a download is compared on (the date-like ones by presence).
fn download_shape(g: &Got) -> Value {
    let h = |k: &str| g.header(k).map(str::to_owned);
    json!({
        "status": g.status,
        "type": h("content-type"),
        "disposition": h("content-disposition").map(|d| d.split(';').next().unwrap_or("").to_owned()),
        "length": h("content-length"),
        "ranges": h("accept-ranges"),
        "range": h("content-range"),
        "cache": h("cache-control"),
        "csp": h("content-security-policy"),
        "frame": h("x-frame-options"),
        "modified": h("last-modified").is_some(),
        "body": String::from_utf8_lossy(&g.bytes),
    })
}

struct Side {
    server: Server,
    su: String,
    cid: String,
}

fn setup(server: Server) -> Side {
    let su = server.su_token();
    let c = server.create_collection(
        &su,
        json!({"name": "docs", "type": "base",
        "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
        "fields": [
            {"name": "title", "type": "text"},
            {"name": "doc", "type": "file", "maxSelect": 1, "maxSize": 100},
            {"name": "pics", "type": "file", "maxSelect": 2},
            {"name": "img", "type": "file", "maxSelect": 1, "mimeTypes": ["image/png"]}
        ]}),
    );
    let cid = c["id"].as_str().expect("id").to_owned();
    Side { server, su, cid }
}

#[test]
fn uploads_are_named_stored_served_and_removed_as_by_the_reference() {
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let sides = [setup(reference), setup(subject)];
    let mut shapes: Vec<Vec<Value>> = vec![Vec::new(), Vec::new()];
    for (n, side) in sides.iter().enumerate() {
        let s = &side.server;
        let out = &mut shapes[n];
        let create = "/api/collections/docs/records";
        // A create with one file and two pictures.
        let r = send(
            s,
            "POST",
            create,
            &side.su,
            multipart(
                &[("title", "first")],
                &[
                    ("doc", "My Report (final).TXT", b"hello world"),
                    ("pics", "a.png", b"one"),
                    ("pics", "archive.tar.gz", b"two"),
                ],
            ),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        let id = r.json["id"].as_str().unwrap().to_owned();
        let doc = r.json["doc"].as_str().unwrap().to_owned();
        let pics: Vec<String> = serde_json::from_value(r.json["pics"].clone()).unwrap();
        out.push(json!([
            mask(&doc),
            pics.iter().map(|p| mask(p)).collect::<Vec<_>>()
        ]));

        // The sidecar is PocketBase's byte for byte (nothing in it is random).
        let dir = s.data_dir().join("storage").join(&side.cid).join(&id);
        out.push(json!(
            std::fs::read_to_string(dir.join(format!("{doc}.attrs"))).unwrap()
        ));
        assert_eq!(std::fs::read(dir.join(&doc)).unwrap(), b"hello world");

        // Downloads: plain, forced attachment, a range, a conditional GET, an unknown name.
        let path = format!("/api/files/{}/{id}/{doc}", side.cid);
        let g = fetch(s, &path, &[]);
        out.push(download_shape(&g));
        out.push(download_shape(&fetch(
            s,
            &format!("{path}?download=1"),
            &[],
        )));
        out.push(download_shape(&fetch(s, &path, &[("Range", "bytes=2-4")])));
        out.push(download_shape(&fetch(s, &path, &[("Range", "bytes=50-")])));
        let lm = g.header("last-modified").unwrap().to_owned();
        out.push(download_shape(&fetch(
            s,
            &path,
            &[("If-Modified-Since", &lm)],
        )));
        out.push(download_shape(&fetch(
            s,
            &format!("/api/files/docs/{id}/{doc}"),
            &[],
        )));
        let missing = fetch(s, &format!("/api/files/docs/{id}/nope_abcdefghij.txt"), &[]);
        out.push(json!([
            missing.status,
            String::from_utf8_lossy(&missing.bytes)
        ]));

        // Validation: too big, too many, wrong type, a name that is not a file.
        let bad = |files: &[(&str, &str, &[u8])]| {
            let r = send(s, "POST", create, &side.su, multipart(&[], files));
            json!([r.status, r.json])
        };
        out.push(bad(&[("doc", "big.bin", &[7u8; 101])]));
        out.push(bad(&[
            ("pics", "1.txt", b"1"),
            ("pics", "2.txt", b"2"),
            ("pics", "3.txt", b"3"),
        ]));
        let r = bad(&[("img", "fake.png", b"plain text, not a png")]);
        out.push(json!([r[0], r[1]["data"]["img"]["code"]]));

        // Replace the single file: the old one is gone from disk and from the route.
        let r = send(
            s,
            "PATCH",
            &format!("{create}/{id}"),
            &side.su,
            multipart(&[], &[("doc", "v2.txt", b"new")]),
        );
        out.push(json!([r.status, r.json["pics"].as_array().map(Vec::len)]));
        let doc2 = r.json["doc"].as_str().unwrap().to_owned();
        out.push(json!([
            fetch(s, &path, &[]).status,
            dir.join(&doc).exists(),
            dir.join(format!("{doc}.attrs")).exists(),
            fetch(s, &format!("/api/files/{}/{id}/{doc2}", side.cid), &[]).bytes,
        ]));
        // Remove one picture by name, then the whole record.
        let r = send(
            s,
            "PATCH",
            &format!("{create}/{id}"),
            &side.su,
            multipart(&[("pics-", &pics[0])], &[]),
        );
        out.push(json!([
            r.status,
            r.json["pics"].as_array().map(Vec::len),
            dir.join(&pics[0]).exists()
        ]));
        let r = s.req("DELETE", &format!("{create}/{id}"), Some(&side.su), None);
        out.push(json!(r.status));
        // PocketBase removes a deleted record's folder in the background (it may still be there
        // when the 204 arrives); ours is gone once the delete has committed.
        if n == 1 {
            assert!(
                !dir.exists(),
                "a deleted record's folder is removed after its commit"
            );
        }
    }
    let [a, b] = [&shapes[0], &shapes[1]];
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        assert_eq!(
            x, y,
            "step {i}: reference (left) and ferrobase (right) differ"
        );
    }
}
