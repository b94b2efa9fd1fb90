//! `expand` and `fields`, generated and compared with the reference JSON for JSON: expand paths
//! of depth 1 to 8 over a fixture with a self-relation chain longer than the depth limit (single
//! and multi, with cycles), back-relations in both syntaxes (`comments_via_node` and the older
//! `comments(node)`), a back-relation with a unique index (an object, not a list), multi
//! relations, relations into collections whose view rule is restrictive (an auth collection
//! showing visible people and oneself, a collection whose records a rule hides by its author) or
//! null (superusers only), unknown and non-relation names, empty segments; combined with
//! `fields` (`*`, plain keys, `expand`, `expand.*`, nested `expand.<a>.expand.<b>.<key>` paths,
//! `:excerpt(n[,true])`), on lists and single records, as a superuser, a guest and two users.

use super::{Auth, Finding, Known, Pair, Rng, canonical, clip, json_diffs};
use crate::common::enc;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const DEFAULT_CASES: usize = 1000;
const WORKERS: usize = 4;
const PASS: &str = "password123";

/// Where ferrobase knowingly differs; matched against the case's text.
const KNOWN: &[Known] = &[];
/// Explained single differences (see `super::known_finding`).
const KNOWN_DETAILS: &[Known] = &[];

const NODES: usize = 12;

fn node_id(i: usize) -> String {
    format!("node{i:011}")
}

/// The collections, in creation order (relations point at earlier ones, or at themselves).
fn collections() -> Vec<Value> {
    vec![
        json!({"id": "people00000001", "name": "people", "type": "auth",
            "listRule": "visible = true || id = @request.auth.id",
            "viewRule": "visible = true || id = @request.auth.id",
            "fields": [{"name": "name", "type": "text"}, {"name": "visible", "type": "bool"},
                {"name": "password", "type": "password", "cost": 4, "min": 8}]}),
        json!({"id": "tags0000000001", "name": "tags", "listRule": "", "viewRule": "",
            "fields": [{"name": "name", "type": "text"}]}),
        json!({"id": "secrets0000001", "name": "secrets",
            "fields": [{"name": "label", "type": "text"}]}),
        // (A self-relation can only be added once the collection exists: see `seed`.)
        json!({"id": "nodes000000001", "name": "nodes", "listRule": "", "viewRule": "",
        "fields": [
            {"name": "name", "type": "text"},
            {"name": "body", "type": "editor"},
            {"name": "owner", "type": "relation", "collectionId": "people00000001"},
            {"name": "tags", "type": "relation", "collectionId": "tags0000000001", "maxSelect": 4},
            {"name": "secret", "type": "relation", "collectionId": "secrets0000001"}
        ]}),
        json!({"id": "comments000001", "name": "comments", "listRule": "author.visible = true",
        "viewRule": "author.visible = true || author = @request.auth.id",
        "fields": [
            {"name": "text", "type": "text"},
            {"name": "node", "type": "relation", "collectionId": "nodes000000001"},
            {"name": "author", "type": "relation", "collectionId": "people00000001"},
            {"name": "about", "type": "relation", "collectionId": "nodes000000001", "maxSelect": 3}
        ]}),
        json!({"id": "notes000000001", "name": "notes", "listRule": "", "viewRule": "",
            "fields": [
                {"name": "text", "type": "text"},
                {"name": "node", "type": "relation", "collectionId": "nodes000000001"}
            ],
            "indexes": ["CREATE UNIQUE INDEX `idx_notes_node` ON `notes` (`node`)"]}),
    ]
}

/// The records, created in order on both servers with the same ids.
fn records() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    for (i, (name, visible)) in [
        ("alice", true),
        ("bob", false),
        ("carol", true),
        ("dave", false),
    ]
    .iter()
    .enumerate()
    {
        out.push((
            "people",
            json!({"id": format!("person{i:09}"), "name": name, "visible": visible,
                "email": format!("{name}@example.com"), "emailVisibility": i % 2 == 0,
                "password": PASS, "passwordConfirm": PASS}),
        ));
    }
    for i in 0..6 {
        out.push((
            "tags",
            json!({"id": format!("tag{i:012}"), "name": format!("tag {i}")}),
        ));
    }
    for i in 0..3 {
        out.push((
            "secrets",
            json!({"id": format!("secret{i:09}"), "label": format!("secret {i}")}),
        ));
    }
    let mut r = Rng::new(0x0e4_9a4d);
    // The chain: node i's parent is node i-1, so `parent.parent...` runs 11 hops deep.
    for i in 0..NODES {
        let mut links: Vec<String> = (0..NODES).map(node_id).collect();
        links = r.subset(&links, 4);
        if i == NODES - 1 {
            links.push(node_id(0));
        }
        let tags: Vec<String> = (0..6).map(|t| format!("tag{t:012}")).collect();
        // The self-relations are set once every node exists (`seed`).
        let mut n = json!({
            "id": node_id(i),
            "name": format!("node {i:02}"),
            "body": format!("<p>Body of <b>node {i}</b> with some longer text</p>"),
            "tags": r.subset(&tags, 3),
            "owner": format!("person{:09}", i % 4),
            "@links": links,
        });
        if i > 0 {
            n["@parent"] = json!(node_id(i - 1));
        }
        if i % 3 == 0 {
            n["secret"] = json!(format!("secret{:09}", i % 3));
        }
        out.push(("nodes", n));
    }
    for i in 0..16 {
        out.push((
            "comments",
            json!({"id": format!("comment{i:08}"), "text": format!("comment {i}"),
                "node": node_id((i * 5) % NODES), "author": format!("person{:09}", i % 4),
                "about": [node_id(i % NODES), node_id((i + 3) % NODES)]}),
        ));
    }
    for i in 0..5 {
        out.push((
            "notes",
            json!({"id": format!("note{i:011}"), "text": format!("note {i}"),
                "node": node_id(i * 2)}),
        ));
    }
    out
}

fn seed(pair: &Pair) -> Result<(), String> {
    for def in collections() {
        let (a, b) = pair.su_json("POST", "/api/collections", Some(&def));
        if a.status != 200 || b.status != 200 {
            return Err(format!(
                "collection {}: {} {} / {} {}",
                def["name"], a.status, a.body, b.status, b.body
            ));
        }
        if def["name"] == "nodes" {
            let mut fields = a.body["fields"].as_array().cloned().unwrap_or_default();
            fields.push(
                json!({"name": "parent", "type": "relation", "collectionId": "nodes000000001"}),
            );
            fields.push(json!({"name": "links", "type": "relation", "collectionId": "nodes000000001", "maxSelect": 5}));
            let (a, b) = pair.su_json(
                "PATCH",
                "/api/collections/nodes",
                Some(&json!({ "fields": fields })),
            );
            if a.status != 200 || b.status != 200 {
                return Err(format!("nodes' self-relations: {} / {}", a.body, b.body));
            }
        }
    }
    let mut later = Vec::new();
    for (c, mut body) in records() {
        // `@name` keys are set by an update once every record exists.
        let mut patch = serde_json::Map::new();
        if let Value::Object(m) = &mut body {
            let keys: Vec<String> = m.keys().filter(|k| k.starts_with('@')).cloned().collect();
            for k in keys {
                if let Some(v) = m.remove(&k) {
                    patch.insert(k[1..].to_owned(), v);
                }
            }
        }
        let (a, b) = pair.su_json(
            "POST",
            &format!("/api/collections/{c}/records"),
            Some(&body),
        );
        if a.status != 200 || b.status != 200 {
            return Err(format!(
                "record {c} {}: {} / {}",
                body["id"], a.body, b.body
            ));
        }
        if !patch.is_empty() {
            later.push((c, body["id"].as_str().unwrap_or("").to_owned(), patch));
        }
    }
    for (c, id, patch) in later {
        let path = format!("/api/collections/{c}/records/{id}");
        let (a, b) = pair.su_json("PATCH", &path, Some(&Value::Object(patch)));
        if a.status != 200 || b.status != 200 {
            return Err(format!("record {c} {id}: {} / {}", a.body, b.body));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// generation

/// The relation names that lead on from a collection, and where they lead.
fn steps(collection: &str) -> &'static [(&'static str, &'static str)] {
    match collection {
        "nodes" => &[
            ("parent", "nodes"),
            ("parent", "nodes"),
            ("parent", "nodes"),
            ("links", "nodes"),
            ("owner", "people"),
            ("tags", "tags"),
            ("secret", "secrets"),
            ("comments_via_node", "comments"),
            ("comments(node)", "comments"),
            ("comments_via_about", "comments"),
            ("notes_via_node", "notes"),
            ("nodes_via_parent", "nodes"),
            ("nodes_via_links", "nodes"),
            ("nodes(parent)", "nodes"),
        ],
        "comments" => &[("node", "nodes"), ("author", "people"), ("about", "nodes")],
        "people" => &[
            ("nodes_via_owner", "nodes"),
            ("comments_via_author", "comments"),
            ("comments(author)", "comments"),
        ],
        "tags" => &[("nodes_via_tags", "nodes")],
        "secrets" => &[("nodes_via_secret", "nodes")],
        "notes" => &[("node", "nodes")],
        _ => &[],
    }
}

/// Names that expand nothing (unknown, not a relation, malformed).
const DUDS: &[&str] = &[
    "nosuch",
    "name",
    "",
    "Parent",
    "nodes_via_nosuch",
    "nosuch_via_node",
    "comments(nosuch)",
    "comments(",
    "id",
    "expand",
];

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
enum Caller {
    Su,
    Guest,
    /// alice (visible) or bob (hidden).
    User(usize),
}

struct Case {
    path: String,
    caller: Caller,
}

struct Gen {
    r: Rng,
}

impl Gen {
    /// One expand path from `root`, 1 to 8 steps, with the collections it passes.
    fn path(&mut self, root: &'static str) -> (Vec<String>, Vec<&'static str>) {
        let depth = if self.r.pct(30) {
            6 + self.r.below(3)
        } else {
            1 + self.r.below(8)
        };
        let mut names = Vec::new();
        let mut colls = vec![root];
        let mut at = root;
        for _ in 0..depth {
            if self.r.pct(4) {
                names.push((*self.r.pick(DUDS)).to_owned());
                break;
            }
            let options = steps(at);
            if options.is_empty() {
                break;
            }
            let (name, next) = *self.r.pick(options);
            names.push(name.to_owned());
            colls.push(next);
            at = next;
        }
        (names, colls)
    }

    fn field_of(&mut self, coll: &str) -> &'static str {
        let options: &[&'static str] = match coll {
            "nodes" => &["name", "id", "body", "parent", "*"],
            "people" => &["name", "email", "id", "*", "visible"],
            "comments" => &["text", "id", "*", "author"],
            "tags" => &["name", "id", "*"],
            "secrets" => &["label", "*"],
            _ => &["id", "*", "text"],
        };
        self.r.pick::<&str>(options)
    }

    /// A `fields` entry that reaches into an expanded path (`expand.a.expand.b.key`).
    fn nested_field(&mut self, names: &[String], colls: &[&'static str]) -> String {
        let upto = 1 + self.r.below(names.len().max(1));
        let mut s = String::new();
        for (i, n) in names.iter().take(upto).enumerate() {
            if i > 0 {
                s.push('.');
            }
            s.push_str("expand.");
            // the old syntax's key is the name as written
            s.push_str(n);
        }
        if self.r.pct(70) {
            let key = self.field_of(colls.get(upto).copied().unwrap_or("nodes"));
            s.push('.');
            s.push_str(key);
        }
        // A path named `expand` gives `expand.expand`: PocketBase's picker renames the entry to
        // what remains (`expand`) inside a loop over a Go map, and whether that loop visits the
        // renamed entry again (then keeping the whole value) is left to Go's map order, so
        // PocketBase answers such a selection differently from request to request. Cut there.
        if let Some(j) = names.iter().take(upto).position(|n| n.trim() == "expand") {
            let kept: Vec<String> = names[..j].iter().map(|n| format!("expand.{n}")).collect();
            return if kept.is_empty() {
                "expand".to_owned()
            } else {
                kept.join(".")
            };
        }
        s
    }

    fn fields(&mut self, paths: &[(Vec<String>, Vec<&'static str>)]) -> String {
        let mut parts: Vec<String> = Vec::new();
        for _ in 0..1 + self.r.below(3) {
            let p = match self.r.below(12) {
                0 => "*".to_owned(),
                1 => "id".to_owned(),
                2 => "name".to_owned(),
                3 => "expand".to_owned(),
                4 => "expand.*".to_owned(),
                5 => format!("name:excerpt({})", self.r.below(8)),
                6 => format!("body:excerpt({},true)", self.r.below(15)),
                7 => "body:excerpt(3,false)".to_owned(),
                8 => "nosuch".to_owned(),
                _ => match paths.get(self.r.below(paths.len().max(1))) {
                    Some((names, colls)) if !names.is_empty() => self.nested_field(names, colls),
                    _ => "expand".to_owned(),
                },
            };
            parts.push(p);
        }
        if self.r.pct(10) {
            parts.push(" expand.owner.name ".to_owned());
        }
        parts.join(",")
    }

    fn case(&mut self) -> Case {
        let (root, base) = match self.r.below(10) {
            0..=5 => (
                "nodes",
                "/api/collections/nodes/records?sort=name&perPage=50".to_owned(),
            ),
            6..=8 => {
                let id = node_id(self.r.below(NODES));
                ("nodes", format!("/api/collections/nodes/records/{id}?x=1"))
            }
            _ => (
                "comments",
                "/api/collections/comments/records?sort=text&perPage=50".to_owned(),
            ),
        };
        let n = 1 + self.r.below(3);
        let paths: Vec<(Vec<String>, Vec<&'static str>)> =
            (0..n).map(|_| self.path(root)).collect();
        let mut expand: Vec<String> = paths.iter().map(|(names, _)| names.join(".")).collect();
        if self.r.pct(5) {
            expand.push(String::new());
        }
        if self.r.pct(5) {
            expand.push(expand[0].clone());
        }
        let sep = if self.r.pct(10) { ", " } else { "," };
        let mut path = format!("{base}&expand={}", enc(&expand.join(sep)));
        if self.r.pct(60) {
            path.push_str(&format!("&fields={}", enc(&self.fields(&paths))));
        }
        let caller = match self.r.below(10) {
            0..=3 => Caller::Su,
            4..=5 => Caller::Guest,
            6..=7 => Caller::User(0),
            _ => Caller::User(1),
        };
        Case { path, caller }
    }
}

fn login(pair: &Pair, email: &str) -> (String, String) {
    let body = json!({"identity": email, "password": PASS});
    let (a, b) = pair.both(
        "POST",
        "/api/collections/people/auth-with-password",
        (Auth::Guest, Auth::Guest),
        Some(super::Body {
            content_type: "application/json",
            bytes: &serde_json::to_vec(&body).expect("json"),
        }),
    );
    let token = |r: &super::Reply| {
        r.body["token"]
            .as_str()
            .unwrap_or_else(|| panic!("login {email}: {}", r.body))
            .to_owned()
    };
    (token(&a), token(&b))
}

#[test]
fn expand_and_fields_match_pocketbase() {
    let started = Instant::now();
    let seed_n = super::seed();
    let n_cases = super::cases("DIFF_EXPAND_CASES", DEFAULT_CASES);
    let Some(pair) = super::start_pair() else {
        return;
    };
    let subject = pair.subject_name;
    println!("differential expand: seed={seed_n:#x} cases={n_cases} subject={subject}");
    if let Err(e) = seed(&pair) {
        panic!("seeding the fixture failed on one side: {e}");
    }
    let users = [
        login(&pair, "alice@example.com"),
        login(&pair, "bob@example.com"),
    ];
    let mut g = Gen {
        r: Rng::new(seed_n ^ 0x000e_8a4d),
    };
    let cases: Vec<Case> = (0..n_cases).map(|_| g.case()).collect();
    let next = AtomicUsize::new(0);
    let found: Mutex<Vec<Finding>> = Mutex::new(Vec::new());
    let statuses: Mutex<std::collections::BTreeMap<u16, usize>> = Mutex::new(Default::default());
    let distinct = Mutex::new(HashSet::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let auth = match case.caller {
                        Caller::Su => (Auth::Su, Auth::Su),
                        Caller::Guest => (Auth::Guest, Auth::Guest),
                        Caller::User(u) => (Auth::Token(&users[u].0), Auth::Token(&users[u].1)),
                    };
                    let (a, b) = pair.both("GET", &case.path, auth, None);
                    *statuses.lock().unwrap().entry(a.status).or_default() += 1;
                    distinct.lock().unwrap().insert(a.body.to_string());
                    let mut details = Vec::new();
                    if a.status != b.status {
                        details.push(format!(
                            "status: reference {} / ferrobase {}",
                            a.status, b.status
                        ));
                        details.push(format!("reference: {}", clip(&a.body.to_string(), 600)));
                        details.push(format!("ferrobase: {}", clip(&b.body.to_string(), 600)));
                    } else {
                        json_diffs(
                            &canonical(&a.body),
                            &canonical(&b.body),
                            "body",
                            &mut details,
                            10,
                        );
                    }
                    if !details.is_empty() {
                        let text =
                            format!("GET {} as {:?}", percent_decode(&case.path), case.caller);
                        found.lock().unwrap().push(Finding {
                            case: i,
                            known: super::known_finding(KNOWN, KNOWN_DETAILS, &text, &details),
                            text,
                            details,
                            follow_on: false,
                        });
                    }
                }
            });
        }
    });
    let mut findings = found.into_inner().unwrap();
    findings.sort_by_key(|f| f.case);
    let statuses = statuses.into_inner().unwrap();
    let header = format!(
        "differential expand: seed={seed_n:#x}, {n_cases} requests ({} distinct reference answers), reference statuses {:?}, {:.1}s",
        distinct.into_inner().unwrap().len(),
        statuses,
        started.elapsed().as_secs_f64()
    );
    super::conclude(
        "expand",
        &header,
        &findings,
        subject,
        &format!("DIFF_SEED={seed_n:#x} DIFF_EXPAND_CASES={n_cases}"),
    );
}

/// The request's query as readable text.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
