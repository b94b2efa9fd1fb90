//! Crash durability of the real binary: writers on several connections create, update and
//! delete records; the server is SIGKILLed at a random moment and restarted on the same data.
//! Every write it acknowledged (a 2xx the client received) must be there exactly, a write in
//! flight at the kill either wholly there or wholly not, `PRAGMA integrity_check` ok, and with
//! the audit plugin one audit row per committed write. With a file field, every write uploads a
//! file: after each restart every record's file is in place with its bytes, no file is left that
//! no record names, and no upload is left in the temporary folder. `FERROBASE_CRASH_KILLS` makes
//! the same code the long run (`scripts/crash-soak.sh`); `FERROBASE_CRASH_SEED` replays a run.

use crate::common::Server;
use crate::rng::{Rng, env_num};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Clients writing at once, each on its own connection, each owning the records it creates
/// (so the order of one record's writes is the order its writer sent them).
const WRITERS: usize = 4;
/// Kills in the test command's run (the long run sets `FERROBASE_CRASH_KILLS`).
const SHORT_KILLS: u64 = 6;
const DEFAULT_SEED: u64 = 0xc0a5_4001;
/// The longest a record's `body` gets: long ones span several pages, so a torn write would show.
const BODY_MAX: usize = 3000;

/// What one record holds, as the writer that wrote it last sent it.
#[derive(Debug, Clone, PartialEq)]
struct Values {
    title: String,
    n: i64,
    body: String,
}

#[derive(Debug, Clone)]
enum Op {
    Create(String, Values),
    Update(String, Values),
    Delete(String),
}

impl Op {
    fn id(&self) -> &str {
        match self {
            Op::Create(id, _) | Op::Update(id, _) | Op::Delete(id) => id,
        }
    }
}

/// One record as the acknowledged writes left it.
#[derive(Debug, Clone)]
struct Rec {
    owner: usize,
    /// None once deleted.
    state: Option<Values>,
    /// Committed updates (each wrote one audit row).
    updates: u64,
}

/// What the test knows must be in the database.
#[derive(Default)]
struct Model {
    records: BTreeMap<String, Rec>,
    /// Acknowledged writes so far (each one checked after every later restart).
    acked: u64,
    /// Writes answered with an error (checked to have left no trace), and the first of them.
    refused: u64,
    first_refusal: Option<String>,
    /// Writes in flight at a kill: how many turned out committed, and how many not.
    in_flight_applied: u64,
    in_flight_lost: u64,
}

impl Model {
    fn apply(&mut self, owner: usize, op: &Op) {
        match op {
            Op::Create(id, v) => {
                let rec = Rec {
                    owner,
                    state: Some(v.clone()),
                    updates: 0,
                };
                assert!(self.records.insert(id.clone(), rec).is_none(), "{id} twice");
            }
            Op::Update(id, v) => {
                let r = self
                    .records
                    .get_mut(id)
                    .expect("updates name a known record");
                r.state = Some(v.clone());
                r.updates += 1;
            }
            Op::Delete(id) => {
                let r = self
                    .records
                    .get_mut(id)
                    .expect("deletes name a known record");
                r.state = None;
            }
        }
    }

    fn live_of(&self, owner: usize) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, r)| r.owner == owner && r.state.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// What one writer saw in one round.
struct Seen {
    /// Answered with a 2xx, in order.
    acked: Vec<Op>,
    /// Answered with anything else (an in-transaction hook over its time budget on a busy box,
    /// say): the write must have left no trace, which the checks after the restart see, as a
    /// record or an audit row that was never acknowledged.
    refused: Vec<(Op, u16, String)>,
    /// The last request, which got no answer: the kill came first (or while it was answered).
    in_flight: Op,
}

/// The bytes of the file a write with `v` uploads (in the file variant): its tag repeated, from
/// 16 bytes to 64 KiB, so the file on disk names the write it came from.
fn file_bytes(v: &Values) -> Vec<u8> {
    v.title
        .repeat(1 + (v.n.unsigned_abs() % 4096) as usize)
        .into_bytes()
}

/// A create or update's request body: JSON, or (in the file variant) multipart with the file.
fn write_body(id: Option<&str>, v: &Values, files: bool) -> (String, Vec<u8>) {
    if !files {
        let mut body = json!({"title": v.title, "n": v.n, "body": v.body});
        if let Some(id) = id {
            body["id"] = json!(id);
        }
        return ("application/json".into(), body.to_string().into_bytes());
    }
    let n = v.n.to_string();
    let mut values = vec![("title", v.title.as_str()), ("n", &n), ("body", &v.body)];
    if let Some(id) = id {
        values.push(("id", id));
    }
    let name = format!("{}.bin", v.title);
    let bytes = file_bytes(v);
    let ct = format!("multipart/form-data; boundary={}", crate::files::BOUNDARY);
    (
        ct,
        crate::files::multipart(&values, &[("doc", &name, &bytes)]),
    )
}

/// One writer: sends writes one after the other until one gets no answer.
fn writer(addr: &str, mut rng: Rng, mut live: Vec<String>, id_prefix: String, files: bool) -> Seen {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let base = format!("http://{addr}/api/collections/posts/records");
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    let mut created = 0u64;
    loop {
        let op = if live.len() < 3 || rng.pct(45) {
            created += 1;
            Op::Create(format!("{id_prefix}{created:09}"), values(&mut rng))
        } else if rng.pct(70) {
            Op::Update(rng.pick(&live).clone(), values(&mut rng))
        } else {
            Op::Delete(live[rng.below(live.len())].clone())
        };
        let sent = match &op {
            Op::Create(id, v) => {
                let (ct, body) = write_body(Some(id), v, files);
                agent.post(&base).header("Content-Type", ct).send(&body[..])
            }
            Op::Update(id, v) => {
                let (ct, body) = write_body(None, v, files);
                agent
                    .patch(format!("{base}/{id}"))
                    .header("Content-Type", ct)
                    .send(&body[..])
            }
            Op::Delete(id) => agent.delete(format!("{base}/{id}")).call(),
        };
        let mut res = match sent {
            Ok(r) => r,
            Err(_) => {
                return Seen {
                    acked,
                    refused,
                    in_flight: op,
                };
            }
        };
        let status = res.status().as_u16();
        // The answer counts only once its body arrived in full: the client saw it.
        let Ok(text) = res.body_mut().read_to_string() else {
            return Seen {
                acked,
                refused,
                in_flight: op,
            };
        };
        if !(200..300).contains(&status) {
            refused.push((op, status, text));
            continue;
        }
        match &op {
            Op::Create(id, _) => live.push(id.clone()),
            Op::Delete(id) => live.retain(|l| l != id),
            Op::Update(..) => {}
        }
        acked.push(op);
    }
}

/// Fresh values; every write's are distinct, so the state read back names the write it came from.
fn values(rng: &mut Rng) -> Values {
    let tag = format!("{:016x}", rng.next());
    let n = (rng.next() >> 12) as i64;
    let len = rng.below(BODY_MAX / tag.len());
    Values {
        body: tag.repeat(len),
        title: tag,
        n,
    }
}

/// The records as they are on disk, and the audit rows per (record, action), read with a
/// connection of the test's own after `PRAGMA integrity_check` passed.
struct OnDisk {
    rows: BTreeMap<String, Values>,
    audit: BTreeMap<(String, String), u64>,
    /// The file variant: each record's file name, and the collection's id (its storage folder).
    docs: BTreeMap<String, String>,
    collection_id: String,
}

fn read_disk(data: &Path, audit: bool, files: bool) -> OnDisk {
    use rusqlite::{Connection, OpenFlags};
    let conn = Connection::open_with_flags(data.join("data.db"), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open data.db read-only");
    let check: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(check, ["ok"], "integrity_check after the restart");
    let tx = conn.unchecked_transaction().unwrap();
    let rows = tx
        .prepare("SELECT id, title, n, body FROM posts")
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Values {
                    title: r.get(1)?,
                    n: r.get::<_, f64>(2)? as i64,
                    body: r.get(3)?,
                },
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let audit = if audit {
        tx.prepare("SELECT record, action, COUNT(*) FROM audit_log GROUP BY record, action")
            .unwrap()
            .query_map([], |r| {
                Ok(((r.get(0)?, r.get(1)?), r.get::<_, i64>(2)? as u64))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    } else {
        BTreeMap::new()
    };
    let docs = if files {
        tx.prepare("SELECT id, doc FROM posts")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    } else {
        BTreeMap::new()
    };
    let collection_id = tx
        .query_row(
            "SELECT id FROM _collections WHERE name = 'posts'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    OnDisk {
        rows,
        audit,
        docs,
        collection_id,
    }
}

/// The file variant's checks: every record's file is in place with its sidecar and the bytes
/// its write uploaded, the storage holds nothing else (no file of a deleted record or of a
/// replaced upload), and the temporary folder is empty. Returns every discrepancy.
fn verify_files(data: &Path, disk: &OnDisk) -> Vec<String> {
    let mut bad = Vec::new();
    let folder = data.join("storage").join(&disk.collection_id);
    for (id, v) in &disk.rows {
        let doc = disk.docs.get(id).map_or("", String::as_str);
        if doc.is_empty() {
            bad.push(format!("{id}: no file name in the record"));
            continue;
        }
        let path = folder.join(id).join(doc);
        match std::fs::read(&path) {
            Ok(bytes) if bytes == file_bytes(v) => {}
            Ok(bytes) => bad.push(format!(
                "{id}/{doc}: {} bytes, not its write's",
                bytes.len()
            )),
            Err(e) => bad.push(format!("{id}/{doc}: missing ({e})")),
        }
        if !folder.join(id).join(format!("{doc}.attrs")).is_file() {
            bad.push(format!("{id}/{doc}: no sidecar"));
        }
    }
    for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
        let id = entry.file_name().to_string_lossy().into_owned();
        let Some(doc) = disk.rows.contains_key(&id).then(|| &disk.docs[&id]) else {
            bad.push(format!("{id}: the folder of a record that is not there"));
            continue;
        };
        for f in std::fs::read_dir(entry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            if name != *doc && name != format!("{doc}.attrs") {
                bad.push(format!("{id}/{name}: a file its record does not name"));
            }
        }
    }
    let temp: Vec<_> = std::fs::read_dir(data.join(".ferrobase_uploads"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    if !temp.is_empty() {
        bad.push(format!("left in the temporary folder: {temp:?}"));
    }
    bad
}

/// Check the disk against the model, deciding each in-flight write by what is there (it must
/// be wholly before or wholly after). Returns every discrepancy.
fn verify(model: &mut Model, pending: &[(usize, Op)], disk: &OnDisk, audit: bool) -> Vec<String> {
    let mut bad = Vec::new();
    for (owner, op) in pending {
        let id = op.id();
        let before = model.records.get(id).and_then(|r| r.state.clone());
        let after = match op {
            Op::Create(_, v) | Op::Update(_, v) => Some(v.clone()),
            Op::Delete(_) => None,
        };
        let found = disk.rows.get(id).cloned();
        if found == after && found != before {
            model.apply(*owner, op);
            model.in_flight_applied += 1;
        } else if found == before {
            model.in_flight_lost += 1;
        } else {
            bad.push(format!(
                "{id}: in flight {op:?}, neither before ({before:?}) nor after: {found:?}"
            ));
        }
    }
    let pending_ids: HashSet<&str> = pending.iter().map(|(_, op)| op.id()).collect();
    for (id, rec) in &model.records {
        let found = disk.rows.get(id);
        if found != rec.state.as_ref() && !pending_ids.contains(id.as_str()) {
            bad.push(format!(
                "{id}: acknowledged {:?}, on disk {found:?}",
                rec.state
            ));
        }
    }
    for id in disk.rows.keys() {
        if !model.records.contains_key(id) {
            bad.push(format!("{id}: on disk, never acknowledged nor in flight"));
        }
    }
    if audit {
        let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (id, rec) in &model.records {
            want.insert((id.clone(), "create".into()), 1);
            if rec.updates > 0 {
                want.insert((id.clone(), "update".into()), rec.updates);
            }
            if rec.state.is_none() {
                want.insert((id.clone(), "delete".into()), 1);
            }
        }
        if want != disk.audit {
            let extra: Vec<_> = disk
                .audit
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(v))
                .collect();
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| disk.audit.get(*k) != Some(v))
                .collect();
            bad.push(format!(
                "audit rows differ from the committed writes: on disk but not wanted {extra:?}, wanted but not on disk {missing:?}"
            ));
        }
    }
    bad
}

/// The figures a run reports.
#[derive(Debug)]
struct Report {
    kills: u64,
    acked: u64,
    in_flight_applied: u64,
    in_flight_lost: u64,
    refused: u64,
    first_refusal: Option<String>,
    /// Records ever created (deleted ones included: their absence is checked too).
    records: usize,
}

/// Start the binary on `dir` (again), healthy and, with `audit`, with the audit plugin loaded
/// (it parks until its collection exists, so not before the first start's setup).
fn start(dir: TempDir, audit: bool) -> Server {
    let s = Server::start_process_in(dir, Duration::from_secs(120));
    if audit {
        wait_audit(&s);
    }
    s
}

fn wait_audit(s: &Server) {
    crate::plugins::wait_loaded(s, &s.su_token(), &["audit"]);
}

fn setup(s: &Server, audit: bool, files: bool) {
    let su = s.su_token();
    let mut fields = vec![
        json!({"name": "title", "type": "text"}),
        json!({"name": "n", "type": "number"}),
        json!({"name": "body", "type": "text", "max": BODY_MAX + 100}),
    ];
    if files {
        fields.push(json!({"name": "doc", "type": "file", "maxSelect": 1, "maxSize": 1 << 20}));
    }
    s.create_collection(
        &su,
        json!({"name": "posts", "type": "base",
        "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
        "fields": fields}),
    );
    if audit {
        s.create_collection(
            &su,
            json!({"name": "audit_log", "type": "base",
                   "fields": [{"name": "action", "type": "text"}, {"name": "record", "type": "text"}]}),
        );
    }
}

/// The whole run: `kills` rounds of write, kill, restart, verify. Panics on the first round
/// with a discrepancy, naming each.
fn run(dir: TempDir, audit: bool, files: bool, kills: u64, seed: u64) -> Report {
    eprintln!(
        "crash: {kills} kills, seed {seed:#x} (FERROBASE_CRASH_SEED replays it), audit plugin {audit}, files {files}"
    );
    let started = Instant::now();
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut s = start(dir, false);
    setup(&s, audit, files);
    if audit {
        wait_audit(&s);
    }
    for round in 0..kills {
        let addr = s.addr.clone();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                // 15 digits, PocketBase's id length: writer, round, then the writer's count.
                let prefix = format!("{w}{round:05}");
                let live = model.live_of(w);
                let wrng = Rng::new(rng.next());
                let addr = addr.clone();
                std::thread::spawn(move || writer(&addr, wrng, live, prefix, files))
            })
            .collect();
        // The kill lands anywhere in the writers' stream: mid-request, mid-commit, mid-answer.
        std::thread::sleep(Duration::from_millis(100 + rng.below(900) as u64));
        s.kill();
        let mut pending = Vec::new();
        for (w, h) in writers.into_iter().enumerate() {
            let seen = h.join().expect("writer thread");
            for op in &seen.acked {
                model.apply(w, op);
            }
            model.acked += seen.acked.len() as u64;
            model.refused += seen.refused.len() as u64;
            if let Some((op, status, body)) = seen.refused.first()
                && model.first_refusal.is_none()
            {
                model.first_refusal = Some(format!(
                    "round {round}: {} answered {status}: {body}",
                    op.id()
                ));
            }
            pending.push((w, seen.in_flight));
        }
        s = start(s.into_dir(), audit);
        let disk = read_disk(&s.data_dir(), audit, files);
        let mut bad = verify(&mut model, &pending, &disk, audit);
        if files {
            bad.extend(verify_files(&s.data_dir(), &disk));
        }
        assert!(
            bad.is_empty(),
            "round {round} (seed {seed:#x}): {} discrepancies after the kill:\n{}",
            bad.len(),
            bad.join("\n")
        );
        // The restarted server serves what is on disk.
        let live = model.records.values().filter(|r| r.state.is_some()).count();
        let r = s.req(
            "GET",
            "/api/collections/posts/records?perPage=1",
            None,
            None,
        );
        assert_eq!(
            r.json["totalItems"],
            json!(live),
            "round {round}: {}",
            r.json
        );
    }
    let report = Report {
        kills,
        acked: model.acked,
        in_flight_applied: model.in_flight_applied,
        in_flight_lost: model.in_flight_lost,
        refused: model.refused,
        first_refusal: model.first_refusal.clone(),
        records: model.records.len(),
    };
    if let Some(first) = &report.first_refusal {
        eprintln!("crash: first refused write: {first}");
    }
    eprintln!(
        "crash: {report:?}, losses 0, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    report
}

fn kills() -> u64 {
    env_num("FERROBASE_CRASH_KILLS").unwrap_or(SHORT_KILLS)
}

fn seed() -> u64 {
    env_num("FERROBASE_CRASH_SEED").unwrap_or(DEFAULT_SEED)
}

/// Each kill interrupts writes: the run is only a test if some were in flight and many were
/// acknowledged before.
fn assert_exercised(r: &Report) {
    assert!(
        r.acked >= 20 * r.kills,
        "too few acknowledged writes: {r:?}"
    );
    assert!(r.records as u64 >= r.kills, "too few records: {r:?}");
    // A refusal is legitimate only as a rare event (a time budget on a starved box).
    assert!(r.refused * 100 <= r.acked, "too many writes refused: {r:?}");
    assert!(
        r.in_flight_applied + r.in_flight_lost >= r.kills,
        "no write was in flight at some kill: {r:?}"
    );
}

#[test]
fn acknowledged_writes_survive_sigkill_exactly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = run(dir, false, false, kills(), seed());
    assert_exercised(&r);
}

#[test]
fn uploaded_files_match_their_records_after_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = run(dir, false, true, kills(), seed() ^ 0xf11e);
    assert_exercised(&r);
}

#[test]
fn audit_rows_written_in_the_transaction_match_their_records_after_sigkill() {
    let toml = "[plugins.audit]\ngrants = [\"db:write\", \"kv\"]\n";
    let Some(dir) = crate::plugins::work_dir_with(&["audit"], toml) else {
        return;
    };
    let r = run(dir, true, false, kills(), seed() ^ 0xa0d1);
    assert_exercised(&r);
}

/// The check itself: a record changed behind the server's back is caught.
#[test]
fn the_check_catches_a_lost_write() {
    let mut model = Model::default();
    let v = |t: &str| Values {
        title: t.into(),
        n: 1,
        body: String::new(),
    };
    model.apply(0, &Op::Create("a".into(), v("x")));
    model.apply(0, &Op::Update("a".into(), v("y")));
    let disk = |title: &str| OnDisk {
        rows: BTreeMap::from([("a".to_owned(), v(title))]),
        audit: BTreeMap::new(),
        docs: BTreeMap::new(),
        collection_id: String::new(),
    };
    assert!(verify(&mut model, &[], &disk("y"), false).is_empty());
    assert_eq!(verify(&mut model, &[], &disk("x"), false).len(), 1);
    // A write in flight may be there or not, but nothing in between.
    let inflight = [(0, Op::Update("a".into(), v("z")))];
    assert_eq!(verify(&mut model, &inflight, &disk("w"), false).len(), 1);
    assert!(verify(&mut model, &inflight, &disk("z"), false).is_empty());
    assert_eq!(model.records["a"].updates, 2);
    // One audit row too many is caught.
    let mut d = disk("z");
    d.audit.insert(("a".into(), "create".into()), 2);
    d.audit.insert(("a".into(), "update".into()), 2);
    assert_eq!(verify(&mut model, &[], &d, true).len(), 1);
    d.audit.insert(("a".into(), "create".into()), 1);
    assert!(verify(&mut model, &[], &d, true).is_empty());
}
