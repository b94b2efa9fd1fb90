//! Thumbnails against the reference: the same images uploaded to both servers, every `?thumb=`
//! variant fetched from each and compared (status, type, disposition, the decoded thumb's
//! dimensions and pixels within a bound), the thumbs and sidecars each keeps on disk, the
//! fallbacks to the original (sizes not allowed, non-images, corrupt files, decompression
//! bombs), and one generation answering many concurrent requests.

use crate::common::{Server, reference_and_subject};
use crate::files::{Got, fetch_at};
use crate::s3::{Files, files_of};
use image::{ImageFormat, RgbaImage};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const BOUNDARY: &str = "----ferrobase-thumbs-test";

/// The field's own sizes; `100x100` is allowed besides them.
const FIELD_THUMBS: &[&str] = &[
    "50x50", "50x0", "0x50", "80x30t", "80x30b", "80x30f", "400x400f", "30x80", "0x500",
];

/// Every size asked for: the allowed ones, one not allowed, and an invalid one.
fn variants() -> Vec<&'static str> {
    let mut v = vec!["100x100"];
    v.extend_from_slice(FIELD_THUMBS);
    v.extend_from_slice(&["33x33", "abc", ""]);
    v
}

fn encode(img: &RgbaImage, format: ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    match format {
        // JPEG has no alpha channel.
        ImageFormat::Jpeg => image::DynamicImage::ImageRgba8(img.clone())
            .into_rgb8()
            .write_to(&mut out, format)
            .unwrap(),
        _ => img.write_to(&mut out, format).unwrap(),
    }
    out.into_inner()
}

/// A smooth picture with some detail, so crops and scales show in the pixels.
fn picture(w: u32, h: u32, alpha: bool) -> RgbaImage {
    RgbaImage::from_fn(w, h, |x, y| {
        let r = (x * 255 / w.max(2)) as u8;
        let g = (y * 255 / h.max(2)) as u8;
        let b = if (x / 10 + y / 10) % 2 == 0 { 40 } else { 200 };
        let a = if alpha && x < w / 4 {
            (y * 255 / h.max(2)) as u8
        } else {
            255
        };
        image::Rgba([r, g, b, a])
    })
}

/// A small PNG with some alpha, for the S3 suite.
pub(crate) fn png_fixture() -> Vec<u8> {
    encode(&picture(120, 80, true), ImageFormat::Png)
}

fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend_from_slice(&13u32.to_be_bytes());
    out.extend_from_slice(&ihdr);
    out.extend_from_slice(&crc32fast::hash(&ihdr).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(b"IEND");
    out.extend_from_slice(&crc32fast::hash(b"IEND").to_be_bytes());
    out
}

/// The uploads: (client name, bytes, how far a thumb's pixels may be from the reference's as a
/// mean absolute difference per channel; the encoders differ, GIF's palettes most).
fn uploads() -> Vec<(&'static str, Vec<u8>, f64)> {
    let mut corrupt = encode(&picture(300, 200, false), ImageFormat::Png);
    corrupt.truncate(300);
    vec![
        (
            "wide.png",
            encode(&picture(300, 200, true), ImageFormat::Png),
            2.0,
        ),
        // JPEG: Go's decoder and encoder against zune's and image's, on a source with sharp
        // chroma edges, measured 8.4 at 100x100 with the same geometry.
        (
            "photo.jpg",
            encode(&picture(320, 240, false), ImageFormat::Jpeg),
            12.0,
        ),
        (
            "tall.webp",
            encode(&picture(150, 260, false), ImageFormat::WebP),
            2.0,
        ),
        (
            "small.png",
            encode(&picture(40, 60, false), ImageFormat::Png),
            2.0,
        ),
        (
            "anim.gif",
            encode(&picture(120, 90, false), ImageFormat::Gif),
            30.0,
        ),
        ("corrupt.png", corrupt, 0.0),
        ("bomb.png", png_header(100_000, 100_000), 0.0),
        ("notes.txt", b"plain text, not an image".to_vec(), 0.0),
    ]
}

fn multipart(files: &[(&str, Vec<u8>, f64)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, bytes, _) in files {
        b.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"img\"; filename=\"{name}\"\r\n\
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

fn fetch(addr: &str, path: &str) -> Got {
    fetch_at(addr, path, &[])
}

struct Side {
    server: Server,
    cid: String,
    id: String,
    /// Client name -> stored name.
    names: Vec<(String, String)>,
    files: Files,
}

impl Side {
    fn dir(&self) -> PathBuf {
        self.server
            .data_dir()
            .join("storage")
            .join(&self.cid)
            .join(&self.id)
    }
    fn stored(&self, original: &str) -> &str {
        &self.names.iter().find(|(o, _)| o == original).unwrap().1
    }
    fn url(&self, stored: &str, thumb: &str) -> String {
        format!("/api/files/{}/{}/{stored}?thumb={thumb}", self.cid, self.id)
    }
}

/// A server with the `pics` collection and one record of `files`, stored on S3 when `s3`.
fn setup(server: Server, files: &[(&str, Vec<u8>, f64)], s3: bool) -> Side {
    let su = server.su_token();
    let view = files_of(&server, &su, s3);
    let c = server.create_collection(
        &su,
        json!({"name": "pics", "type": "base", "viewRule": "",
        "fields": [{"name": "img", "type": "file", "maxSelect": 20, "maxSize": 10_000_000,
                    "thumbs": FIELD_THUMBS}]}),
    );
    let cid = c["id"].as_str().expect("id").to_owned();
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let body = multipart(files);
    let r = server.raw(
        "POST",
        "/api/collections/pics/records",
        Some(&su),
        Some((&ct, &body)),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_owned();
    let stored: Vec<String> = serde_json::from_value(r.json["img"].clone()).unwrap();
    let names = files
        .iter()
        .map(|f| f.0.to_owned())
        .zip(stored)
        .collect::<Vec<_>>();
    Side {
        server,
        cid,
        id,
        names,
        files: view,
    }
}

/// A header value with the stored name (random per server) replaced by `N`.
fn masked(v: Option<&str>, stored: &str) -> Value {
    v.map_or(Value::Null, |v| json!(v.replace(stored, "N")))
}

fn mean_abs_diff(a: &RgbaImage, b: &RgbaImage) -> f64 {
    let total: u64 = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    total as f64 / a.as_raw().len().max(1) as f64
}

/// The files of a record's thumbs folders, the stored name replaced by `N`, with each
/// sidecar's JSON (its MD5 left out: the encoders differ).
fn thumbs_on_disk(dir: &Path, names: &[(String, String)]) -> Value {
    let mut out = Vec::new();
    for (_, stored) in names {
        let tdir = dir.join(format!("thumbs_{stored}"));
        let Ok(entries) = std::fs::read_dir(&tdir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let name = f
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace(stored, "N");
            let attrs = if name.ends_with(".attrs") {
                let mut v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
                v["md5"] = json!(v["md5"].as_str().map(str::len));
                v
            } else {
                Value::Null
            };
            out.push(json!([format!("thumbs_N/{name}"), attrs]));
        }
    }
    json!(out)
}

/// The thumbs a side keeps: on disk with their sidecars, or in its bucket with their types.
fn thumbs_kept(side: &Side) -> Value {
    match &side.files {
        Files::Local(_) => thumbs_on_disk(&side.dir(), &side.names),
        Files::S3(moto, bucket) => {
            let prefix = format!("{}/{}/thumbs_", side.cid, side.id);
            let mut out = Vec::new();
            for key in moto.keys(bucket, &prefix) {
                let (_, meta) = moto.object(bucket, &key).unwrap();
                let mut name = key[prefix.len() - "thumbs_".len()..].to_owned();
                for (_, stored) in &side.names {
                    name = name.replace(stored, "N");
                }
                out.push(json!([name, meta]));
            }
            json!(out)
        }
    }
}

#[test]
fn thumbs_are_made_served_and_kept_as_by_the_reference() {
    thumbs_are_made_served_and_kept(false);
}

#[test]
fn thumbs_are_made_served_and_kept_on_s3_as_by_the_reference() {
    thumbs_are_made_served_and_kept(true);
}

fn thumbs_are_made_served_and_kept(s3: bool) {
    if s3 && crate::s3::moto().is_none() {
        return;
    }
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let files = uploads();
    let sides = [setup(reference, &files, s3), setup(subject, &files, s3)];
    let mut checked = 0;
    let mut first_answers: Vec<(String, Got)> = Vec::new();
    for (original, _, bound) in &files {
        for thumb in variants() {
            let mut got: Vec<Got> = sides
                .iter()
                .map(|s| fetch(&s.server.addr, &s.url(s.stored(original), thumb)))
                .collect();
            let shape = |g: &Got, s: &Side| {
                let stored = s.stored(original);
                json!({
                    "status": g.status,
                    "type": g.header("content-type"),
                    "disposition": masked(g.header("content-disposition"), stored),
                    "cache": g.header("cache-control"),
                    "ranges": g.header("accept-ranges"),
                    "csp": g.header("content-security-policy"),
                })
            };
            let what = format!("{original} ?thumb={thumb}");
            assert_eq!(
                shape(&got[0], &sides[0]),
                shape(&got[1], &sides[1]),
                "{what}: reference (left) and ferrobase (right) differ"
            );
            let served_thumb = got[0]
                .header("content-disposition")
                .is_some_and(|d| !d.contains(&format!("\"{}\"", sides[0].stored(original))));
            if !served_thumb {
                // The original, byte for byte, on both.
                assert_eq!(got[0].bytes, got[1].bytes, "{what}");
                continue;
            }
            let [a, b] = [&got[0].bytes, &got[1].bytes].map(|bytes| {
                image::load_from_memory(bytes)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                    .into_rgba8()
            });
            assert_eq!(a.dimensions(), b.dimensions(), "{what}");
            let diff = mean_abs_diff(&a, &b);
            assert!(
                diff <= *bound,
                "{what}: pixels differ by {diff:.2} on average"
            );
            assert_eq!(
                image::guess_format(&got[0].bytes).unwrap(),
                image::guess_format(&got[1].bytes).unwrap(),
                "{what}"
            );
            checked += 1;
            first_answers.push((
                sides[1].url(sides[1].stored(original), thumb),
                got.remove(1),
            ));
        }
    }
    // Asked again, a thumb comes from memory (locally): the same answer, headers and bytes, and
    // the same conditional answers.
    let ours = &sides[1];
    for (url, first) in &first_answers {
        let again = fetch(&ours.server.addr, url);
        let headers = |g: &Got| {
            let mut h: Vec<(String, String)> = g
                .headers
                .iter()
                .filter(|(k, _)| k != "date")
                .cloned()
                .collect();
            h.sort();
            h
        };
        assert_eq!(
            (again.status, headers(&again)),
            (first.status, headers(first)),
            "{url}"
        );
        assert_eq!(again.bytes, first.bytes, "{url}");
        if let Some(modified) = first.header("last-modified") {
            let not_modified = fetch_at(&ours.server.addr, url, &[("If-Modified-Since", modified)]);
            assert_eq!(not_modified.status, 304, "{url}");
        }
    }
    // Five images, ten allowed sizes each (bar the ones a source cannot give).
    assert!(checked >= 45, "only {checked} thumbs compared");

    // What each keeps: the same thumbs, named and described alike.
    assert_eq!(thumbs_kept(&sides[0]), thumbs_kept(&sides[1]));

    // A thumb is made once: asked again, the same bytes come from the same file.
    let wide = ours.stored("wide.png");
    if let Files::S3(moto, bucket) = &ours.files {
        let key = format!("{}/{}/thumbs_{wide}/50x50_{wide}", ours.cid, ours.id);
        let (kept, _) = moto.object(bucket, &key).unwrap();
        let again = fetch(&ours.server.addr, &ours.url(wide, "50x50"));
        assert_eq!(again.bytes, kept);
        return;
    }
    let kept = ours.dir().join(format!("thumbs_{wide}/50x50_{wide}"));
    let before = std::fs::metadata(&kept).unwrap().modified().unwrap();
    let first = std::fs::read(&kept).unwrap();
    let again = fetch(&ours.server.addr, &ours.url(wide, "50x50"));
    assert_eq!(again.bytes, first);
    assert_eq!(
        std::fs::metadata(&kept).unwrap().modified().unwrap(),
        before
    );
}

#[test]
fn concurrent_requests_for_one_thumb_get_the_same_bytes() {
    concurrent_requests_for_one_thumb(false);
}

#[test]
fn concurrent_requests_for_one_thumb_on_s3_get_the_same_bytes() {
    concurrent_requests_for_one_thumb(true);
}

fn concurrent_requests_for_one_thumb(s3: bool) {
    if s3 && crate::s3::moto().is_none() {
        return;
    }
    let files = vec![(
        "big.png",
        encode(&picture(1200, 900, false), ImageFormat::Png),
        0.0,
    )];
    let side = setup(Server::start(), &files, s3);
    let stored = side.stored("big.png").to_owned();
    let url = side.url(&stored, "80x30f");
    let addr = side.server.addr.clone();
    let got: Vec<Got> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| fetch(&addr, &url))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for g in &got {
        assert_eq!(g.status, 200);
        assert_eq!(g.header("content-type"), Some("image/png"));
        assert_eq!(g.bytes, got[0].bytes);
    }
    let img = image::load_from_memory(&got[0].bytes).unwrap();
    assert_eq!((img.width(), img.height()), (40, 30));
    // One thumb and its sidecar (on S3: one object); no temporary file left beside them.
    match &side.files {
        Files::Local(_) => {
            let tdir = side.dir().join(format!("thumbs_{stored}"));
            assert_eq!(std::fs::read_dir(tdir).unwrap().count(), 2);
        }
        Files::S3(moto, bucket) => {
            let prefix = format!("{}/{}/thumbs_{stored}/", side.cid, side.id);
            assert_eq!(moto.keys(bucket, &prefix).len(), 1);
            assert_eq!(
                crate::s3::count_files(&side.server.data_dir().join(".ferrobase_uploads")),
                0
            );
        }
    }
}
