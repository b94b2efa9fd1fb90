//! The S3 backend against a real S3-compatible server on loopback (moto's server, which
//! `scripts/test.sh` installs into `.venv-moto`): one moto process per test binary, a bucket
//! per server. Besides the file and thumb suites run a second time on S3 (`files.rs`,
//! `thumbs.rs`): the keys PocketBase uses, nothing left by deletes and rolled-back writes, the
//! secret never in a response, `POST /api/settings/test/s3` as the reference answers it, and
//! a pb_data + bucket written by PocketBase served by ferrobase and back.

use crate::common::{Server, free_port, reference_and_subject};
use serde_json::{Value, json};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The secret the servers are given: it must never come back in a response.
pub const SECRET: &str = "moto-secret-never-shown";

/// What the tests' own requests to moto carry: moto refuses some anonymous requests (403)
/// but does not check signatures.
const MOTO_AUTH: &str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
                         SignedHeaders=host, Signature=0";

/// The moto server of this test process.
pub struct Moto {
    pub endpoint: String,
    agent: ureq::Agent,
    /// Kept open: moto's wrapper kills it when this pipe closes (this process ended).
    _child: Mutex<(Child, ChildStdin)>,
}

/// moto's S3 server (scripts/test.sh installs it into `.venv-moto`).
fn moto_bin() -> Option<PathBuf> {
    crate::common::tool(
        "FERROBASE_MOTO_BIN",
        ".venv-moto/bin/moto_server",
        "moto's S3 server",
    )
}

/// The moto server, started on first use; None (with the skip message) without moto.
pub fn moto() -> Option<&'static Moto> {
    static MOTO: OnceLock<Option<Moto>> = OnceLock::new();
    MOTO.get_or_init(|| {
        let bin = moto_bin()?;
        let port = free_port();
        // The wrapper shell ends moto when its stdin closes, which happens when this test
        // process exits however it exits: no moto outlives the tests.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" -H 127.0.0.1 -p "$1" >/dev/null 2>&1 & pid=$!; read _; kill $pid"#)
            .arg(&bin)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let stdin = child.stdin.take().expect("piped stdin");
        let moto = Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .into(),
            _child: Mutex::new((child, stdin)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while moto.agent.get(&moto.endpoint).call().is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    })
    .as_ref()
}

impl Moto {
    /// A new empty bucket.
    pub fn bucket(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "fb-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let r = self
            .agent
            .put(format!("{}/{name}", self.endpoint))
            .header("authorization", MOTO_AUTH)
            .send_empty()
            .expect("create bucket");
        assert_eq!(r.status(), 200, "create bucket {name}");
        name
    }

    /// Every key in `bucket` under `prefix`, sorted.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut r = self
            .agent
            .get(format!("{}/{bucket}", self.endpoint))
            .header("authorization", MOTO_AUTH)
            .query("list-type", "2")
            .query("prefix", prefix)
            .query("max-keys", "1000")
            .call()
            .expect("list");
        let body = r.body_mut().read_to_string().unwrap_or_default();
        let re = regex::Regex::new("<Key>([^<]*)</Key>").unwrap();
        let mut keys: Vec<String> = re
            .captures_iter(&body)
            .map(|c| c[1].replace("&amp;", "&"))
            .collect();
        keys.sort();
        keys
    }

    /// Put an object into `bucket` behind the servers' backs.
    pub fn put(&self, bucket: &str, key: &str, content_type: &str, bytes: &[u8]) {
        let r = self
            .agent
            .put(format!("{}/{bucket}/{key}", self.endpoint))
            .header("authorization", MOTO_AUTH)
            .header("content-type", content_type)
            .send(bytes)
            .expect("put object");
        assert_eq!(r.status(), 200, "put {bucket}/{key}");
    }

    /// An object's bytes and its content type and `original-filename` metadata, or None.
    pub fn object(&self, bucket: &str, key: &str) -> Option<(Vec<u8>, Value)> {
        let mut r = self
            .agent
            .get(format!("{}/{bucket}/{key}", self.endpoint))
            .header("authorization", MOTO_AUTH)
            .call()
            .expect("get");
        if r.status() != 200 {
            return None;
        }
        let h = |k: &str| {
            r.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let meta = json!({
            "type": h("content-type"),
            "original": h("x-amz-meta-original-filename"),
        });
        let mut bytes = Vec::new();
        r.body_mut()
            .as_reader()
            .read_to_end(&mut bytes)
            .expect("object bytes");
        Some((bytes, meta))
    }
}

/// Switch `server` to S3 on `bucket` of the moto server.
pub fn use_s3(server: &Server, su: &str, moto: &Moto, bucket: &str) {
    let r = server.req(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(
            &json!({"s3": {"enabled": true, "bucket": bucket, "region": "us-east-1",
            "endpoint": moto.endpoint, "accessKey": "ferrobase-test", "secret": SECRET,
            "forcePathStyle": true}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert!(!r.json.to_string().contains(SECRET));
}

/// Where a side's files are, for the checks that look behind the API: the data dir's
/// `storage/` folder, or a bucket.
pub enum Files {
    Local(PathBuf),
    S3(&'static Moto, String),
}

impl Files {
    /// Where a stored file lies on disk (`None` on S3).
    pub fn local_path(&self, cid: &str, id: &str, name: &str) -> Option<std::path::PathBuf> {
        match self {
            Files::Local(root) => Some(root.join(cid).join(id).join(name)),
            Files::S3(..) => None,
        }
    }

    pub fn bytes(&self, cid: &str, id: &str, name: &str) -> Option<Vec<u8>> {
        match self {
            Files::Local(root) => std::fs::read(root.join(cid).join(id).join(name)).ok(),
            Files::S3(m, b) => m.object(b, &format!("{cid}/{id}/{name}")).map(|o| o.0),
        }
    }

    /// What is stored about a file besides its bytes: the `.attrs` sidecar, or the object's
    /// content type and metadata.
    pub fn attrs(&self, cid: &str, id: &str, name: &str) -> Option<String> {
        match self {
            Files::Local(root) => {
                std::fs::read_to_string(root.join(cid).join(id).join(format!("{name}.attrs"))).ok()
            }
            Files::S3(m, b) => m
                .object(b, &format!("{cid}/{id}/{name}"))
                .map(|o| o.1.to_string()),
        }
    }

    /// Files stored under a collection (and a record), thumbs and sidecars included.
    pub fn count(&self, cid: &str, id: Option<&str>) -> usize {
        match self {
            Files::Local(root) => {
                let dir = id.map_or(root.join(cid), |id| root.join(cid).join(id));
                count_files(&dir)
            }
            Files::S3(m, b) => {
                let prefix = id.map_or(format!("{cid}/"), |id| format!("{cid}/{id}/"));
                m.keys(b, &prefix).len()
            }
        }
    }
}

/// Entries under a folder, recursively (0 when it does not exist).
pub fn count_files(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            if e.path().is_dir() {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// A side's file view: S3 (after switching the server to a new bucket) or its local folder.
pub fn files_of(server: &Server, su: &str, s3: bool) -> Files {
    if s3 {
        let moto = moto().expect("moto is checked before servers start");
        let bucket = moto.bucket();
        use_s3(server, su, moto, &bucket);
        Files::S3(moto, bucket)
    } else {
        Files::Local(server.data_dir().join("storage"))
    }
}

const BOUNDARY: &str = "----ferrobase-s3-test";

fn upload(s: &Server, su: &str, method: &str, path: &str, files: &[(&str, &str, &[u8])]) -> Value {
    let mut b = Vec::new();
    for (k, name, bytes) in files {
        b.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\n\r\n"
            )
            .as_bytes(),
        );
        b.extend_from_slice(bytes);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let r = s.raw(method, path, Some(su), Some((&ct, &b)));
    json!({"status": r.status, "body": r.json})
}

/// `<collectionId>/<recordId>/<name>` keys with the random parts masked.
fn masked_keys(keys: &[String], cid: &str, id: &str, pic: &str) -> Vec<String> {
    let re = regex::Regex::new("_[a-z0-9]{10}\\.").unwrap();
    keys.iter()
        .map(|k| {
            let k = k.replace(cid, "C").replace(id, "ID").replace(pic, "PIC");
            re.replace_all(&k, "_R.").into_owned()
        })
        .collect()
}

/// The keys each server writes for one record's files and thumbs, its update, a rule that
/// rolls a create back, and the deletes, compared with the reference on the same moto.
#[test]
fn objects_land_and_leave_as_pocketbase_keeps_them() {
    let Some(moto) = moto() else { return };
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let png = crate::thumbs::png_fixture();
    let mut shapes: Vec<Vec<Value>> = vec![Vec::new(), Vec::new()];
    for (n, s) in [reference, subject].iter().enumerate() {
        let out = &mut shapes[n];
        let su = s.su_token();
        let bucket = moto.bucket();
        use_s3(s, &su, moto, &bucket);
        let c = s.create_collection(
            &su,
            json!({"name": "docs", "listRule": "", "viewRule": "", "createRule": "title != 'no'",
                "updateRule": "", "deleteRule": "",
                "fields": [{"name": "title", "type": "text"},
                    {"name": "doc", "type": "file", "maxSelect": 1},
                    {"name": "pics", "type": "file", "maxSelect": 3}]}),
        );
        let cid = c["id"].as_str().unwrap().to_owned();
        let url = "/api/collections/docs/records";
        let r = upload(
            s,
            &su,
            "POST",
            url,
            &[
                ("doc", "Résumé (v2).txt", b"hello"),
                ("pics", "p.png", &png),
            ],
        );
        assert_eq!(r["status"], 200, "{r}");
        let id = r["body"]["id"].as_str().unwrap().to_owned();
        let pic = r["body"]["pics"][0].as_str().unwrap().to_owned();
        let doc = r["body"]["doc"].as_str().unwrap().to_owned();
        let thumb = crate::files::fetch_at(
            &s.addr,
            &format!("/api/files/docs/{id}/{pic}?thumb=100x100"),
            &[],
        );
        assert_eq!(thumb.status, 200);
        out.push(json!(masked_keys(&moto.keys(&bucket, ""), &cid, &id, &pic)));
        let (bytes, meta) = moto.object(&bucket, &format!("{cid}/{id}/{doc}")).unwrap();
        out.push(json!([String::from_utf8_lossy(&bytes), meta]));
        let thumb_key = format!("{cid}/{id}/thumbs_{pic}/100x100_{pic}");
        out.push(moto.object(&bucket, &thumb_key).unwrap().1);

        // A create the rule refuses after its upload was received: nothing lands.
        let r2 = s.raw(
            "POST",
            url,
            None,
            Some((
                &format!("multipart/form-data; boundary={BOUNDARY}"),
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nno\r\n\
                     --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"x.txt\"\r\n\r\nx\r\n\
                     --{BOUNDARY}--\r\n"
                )
                .as_bytes(),
            )),
        );
        out.push(json!([r2.status, r2.json]));
        // Replacing the file and removing the picture drop their objects and the thumbs.
        let r = upload(
            s,
            &su,
            "PATCH",
            &format!("{url}/{id}"),
            &[("doc", "new.txt", b"new")],
        );
        assert_eq!(r["status"], 200, "{r}");
        let r = s.req(
            "PATCH",
            &format!("{url}/{id}"),
            Some(&su),
            Some(&json!({"pics-": [pic]})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        out.push(json!(masked_keys(
            &moto.keys(&bucket, &format!("{cid}/")),
            &cid,
            &id,
            &pic
        )));
        // Deleting the record removes everything of it (PocketBase does it in the background).
        let r = s.req("DELETE", &format!("{url}/{id}"), Some(&su), None);
        out.push(json!(r.status));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !moto.keys(&bucket, &format!("{cid}/")).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        out.push(json!(moto.keys(&bucket, "")));
        if n == 1 {
            assert_eq!(
                count_files(&s.data_dir().join(".ferrobase_uploads")),
                0,
                "no temporary upload is left"
            );
            assert_eq!(
                count_files(&s.data_dir().join("storage")),
                0,
                "nothing stored locally"
            );
        }
        // The secret is in no answer: settings, and the test endpoint's errors.
        let r = s.req("GET", "/api/settings", Some(&su), None);
        assert!(!r.json.to_string().contains(SECRET), "{}", r.json);
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

/// `POST /api/settings/test/s3` for a disabled, a working, a missing and an unreachable
/// bucket, and for `backups`, as the reference answers (the random test key masked).
#[test]
fn the_s3_test_answers_as_the_reference() {
    let Some(moto) = moto() else { return };
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let random = regex::Regex::new("pb_settings_test_[A-Za-z0-9]{5}").unwrap();
    let mut shapes: Vec<Vec<Value>> = vec![Vec::new(), Vec::new()];
    for (n, s) in [reference, subject].iter().enumerate() {
        let out = &mut shapes[n];
        let su = s.su_token();
        let test = |fs: &str| {
            let r = s.req(
                "POST",
                "/api/settings/test/s3",
                Some(&su),
                Some(&json!({ "filesystem": fs })),
            );
            let text = r.json.to_string();
            assert!(!text.contains(SECRET), "{text}");
            json!([r.status, random.replace_all(&text, "pb_settings_test_R")])
        };
        out.push(test("storage"));
        out.push(test("nope"));
        let bucket = moto.bucket();
        use_s3(s, &su, moto, &bucket);
        out.push(test("storage"));
        out.push(json!(moto.keys(&bucket, "")));
        out.push(test("backups"));
        let patch = |v: Value| {
            let r = s.req(
                "PATCH",
                "/api/settings",
                Some(&su),
                Some(&json!({ "s3": v })),
            );
            assert_eq!(r.status, 200, "{}", r.json);
        };
        patch(json!({"bucket": "no-such-bucket"}));
        out.push(test("storage"));
        let closed = format!("http://127.0.0.1:{}", free_port());
        patch(json!({"bucket": bucket, "endpoint": closed}));
        let r = test("storage").to_string();
        let addr = closed.trim_start_matches("http://");
        out.push(json!(r.replace(addr, "ADDR").replace(&bucket, "B")));
    }
    let [a, b] = [&shapes[0], &shapes[1]];
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        assert_eq!(
            x, y,
            "step {i}: reference (left) and ferrobase (right) differ"
        );
    }
}

/// A pb_data + bucket written by PocketBase is served by ferrobase (the file, a thumb
/// PocketBase made, a thumb ferrobase makes), and ferrobase's uploads are served back by
/// PocketBase from the same bucket.
#[test]
fn a_bucket_written_by_pocketbase_serves_both_ways() {
    let Some(moto) = moto() else { return };
    let Some(ref_bin) = crate::common::reference_bin() else {
        return;
    };
    let ref_bin = ref_bin.to_str().unwrap().to_owned();
    let png = crate::thumbs::png_fixture();
    let pb = Server::start_bin(&ref_bin);
    let su = pb.su_token();
    let bucket = moto.bucket();
    use_s3(&pb, &su, moto, &bucket);
    pb.create_collection(
        &su,
        json!({"name": "docs", "listRule": "", "viewRule": "",
            "fields": [{"name": "pics", "type": "file", "maxSelect": 3}]}),
    );
    let r = upload(
        &pb,
        &su,
        "POST",
        "/api/collections/docs/records",
        &[("pics", "a.png", &png)],
    );
    assert_eq!(r["status"], 200, "{r}");
    let id = r["body"]["id"].as_str().unwrap().to_owned();
    let a = r["body"]["pics"][0].as_str().unwrap().to_owned();
    let file = |addr: &str, name: &str, q: &str| {
        crate::files::fetch_at(addr, &format!("/api/files/docs/{id}/{name}{q}"), &[])
    };
    let pb_thumb = file(&pb.addr, &a, "?thumb=100x100");
    assert_eq!(pb_thumb.status, 200);
    let dir = pb.into_dir();

    // Ferrobase on PocketBase's data dir (whose settings point at the bucket).
    let fb = Server::start_in(dir);
    assert_eq!(file(&fb.addr, &a, "").bytes, png);
    assert_eq!(file(&fb.addr, &a, "?thumb=100x100").bytes, pb_thumb.bytes);
    let made = file(&fb.addr, &a, "?thumb=50x0");
    assert_eq!(made.status, 200);
    assert_eq!(made.header("content-type"), Some("image/png"));
    let su = fb.su_token();
    let r = upload(
        &fb,
        &su,
        "PATCH",
        &format!("/api/collections/docs/records/{id}"),
        &[("pics+", "b.png", &png)],
    );
    assert_eq!(r["status"], 200, "{r}");
    let b = r["body"]["pics"][1].as_str().unwrap().to_owned();
    let dir = fb.into_dir();

    // And back: PocketBase serves ferrobase's upload and thumb from the bucket.
    let pb = Server::start_bin_in_dir(&ref_bin, dir);
    let got = file(&pb.addr, &b, "");
    assert_eq!(got.status, 200);
    assert_eq!(got.bytes, png);
    assert_eq!(got.header("content-type"), Some("image/png"));
    let got = file(&pb.addr, &a, "?thumb=50x0");
    assert_eq!(
        got.bytes, made.bytes,
        "PocketBase serves the thumb ferrobase made"
    );
}

/// A file larger than one part goes up as a multipart upload (parts read one at a time from
/// the temporary file) and comes back whole, and by ranges across the part boundary.
#[test]
fn a_large_upload_goes_up_in_parts_and_streams_back() {
    let Some(moto) = moto() else { return };
    let s = Server::start();
    let su = s.su_token();
    let bucket = moto.bucket();
    use_s3(&s, &su, moto, &bucket);
    let c = s.create_collection(
        &su,
        json!({"name": "big", "viewRule": "",
            "fields": [{"name": "f", "type": "file", "maxSelect": 1, "maxSize": 20_000_000}]}),
    );
    let cid = c["id"].as_str().unwrap().to_owned();
    let bytes: Vec<u8> = (0..(7u32 << 20)).map(|i| (i % 251) as u8).collect();
    let r = upload(
        &s,
        &su,
        "POST",
        "/api/collections/big/records",
        &[("f", "big.bin", &bytes)],
    );
    assert_eq!(r["status"], 200, "{r}");
    let id = r["body"]["id"].as_str().unwrap();
    let name = r["body"]["f"].as_str().unwrap();
    let (stored, meta) = moto.object(&bucket, &format!("{cid}/{id}/{name}")).unwrap();
    assert!(stored == bytes, "the object holds the upload");
    assert_eq!(meta["original"], "big.bin");
    let path = format!("/api/files/big/{id}/{name}");
    let whole = crate::files::fetch_at(&s.addr, &path, &[]);
    assert_eq!(whole.status, 200);
    assert!(whole.bytes == bytes, "the download is the upload");
    let at = (6u64 << 20) - 10;
    let range = format!("bytes={at}-{}", at + 19);
    let part = crate::files::fetch_at(&s.addr, &path, &[("Range", &range)]);
    assert_eq!(part.status, 206);
    assert_eq!(part.bytes, bytes[at as usize..at as usize + 20]);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes {at}-{}/{}", at + 19, bytes.len()).as_str())
    );
    assert_eq!(count_files(&s.data_dir().join(".ferrobase_uploads")), 0);
}
