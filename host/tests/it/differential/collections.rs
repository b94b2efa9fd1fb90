//! The collections API, generated and compared with the reference: collection definitions and
//! updates sent to both servers in the same order, in episodes of a few steps each (an episode
//! starts from the system collections alone and ends by deleting what it created).
//!
//! A step is one request: a create (names drawn from valid, reserved, unicode, punctuated, empty,
//! SQL-looking and over-long sets; every field type with valid and invalid options, wrongly typed
//! options included; rules valid and invalid; indexes; an explicit id now and then), a view
//! create (queries valid and invalid), an update (rename, rules, fields added, removed, renamed,
//! retyped, their options changed, required fields added to collections with records, indexes,
//! the view query, the collection type, the collection's own JSON sent back), a delete (of
//! referenced, system and missing collections), a truncate, an import, or a record write into
//! one of the episode's collections (so that schema changes meet data, and later writes meet the
//! changed schema).
//!
//! Compared for each step: the status; for errors the message and every nested `data` code with
//! its params (and, apart, the nested messages); for successes the collection (or record) JSON
//! with timestamps and random view-field ids normalised. After every step that changed the
//! schema on either side, the whole collection list is compared too, and the records of the
//! collection it touched and of every view. The generator follows the reference: what it did is
//! what the next steps build on.

use super::{
    Auth, Body, Finding, Known, Pair, Reply, Rng, canonical, clip, error_shape, json_diffs,
    sample_value,
};
use crate::common::enc;
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::time::Instant;

const DEFAULT_CASES: usize = 1000;
const USERS_ID: &str = "_pb_users_auth_";

/// Where ferrobase knowingly differs; matched against the step's text.
const KNOWN: &[Known] = &[];

/// Differences in single reported lines that are explained; a step whose every difference
/// matches one of these is a known divergence.
const KNOWN_DETAILS: &[Known] = &[
    Known {
        // No closing quotes: a long message is clipped (`…(N chars)`) before its quote.
        pattern: "nested message.*Rule: \"Invalid rule. Raw error: * / \"Invalid rule. Raw error: *",
        reason: "Both refuse the rule with `validation_invalid_rule` and PocketBase's prefix; the text after \"Raw error:\" is each filter compiler's own explanation (PocketBase's fexpr scanner and resolver words, ferrobase's parser and resolver words). Matching it would mean reproducing PocketBase's parser error strings one by one; the code, the field and the prefix are what clients see and match.",
    },
    Known {
        pattern: "nested message.*autogeneratePattern: \"The provided autogenerate pattern could produce invalid field values, ex.: *",
        reason: "The message quotes one randomly generated example value; both servers generate their own.",
    },
    Known {
        pattern: "nested message.collections: \"*import*",
        reason: "An import that fails for another reason than a collection's validation quotes the underlying error: PocketBase's Go decoder and SQLite driver words, ferrobase's own. Status, message and code (`validation_collections_import_failure`) agree.",
    },
    Known {
        pattern: "nested message.collections: \"Data validations failed for collection * / \"Data validations failed for collection *",
        reason: "A collection that fails its validation in an import is quoted with its errors as Go's indented JSON of the validators' raw texts, as PocketBase writes it. Ferrobase derives each raw text from its API message (ozzo-validation's in lower case, the full stop PocketBase's API adds taken off): it differs where PocketBase's own text already ended with a full stop (\"Field type cannot be changed.\") and in a rule's parser words (see the rule entry above). Status, message, code and the keys of the map agree.",
    },
];

// ---------------------------------------------------------------------------------------------
// the model: the episode's collections as the reference has them

#[derive(Clone)]
struct Coll {
    json: Value,
    records: Vec<String>,
}

impl Coll {
    fn id(&self) -> String {
        self.json["id"].as_str().unwrap_or("").to_owned()
    }
    fn name(&self) -> String {
        self.json["name"].as_str().unwrap_or("").to_owned()
    }
    fn kind(&self) -> &str {
        self.json["type"].as_str().unwrap_or("base")
    }
    fn fields(&self) -> Vec<Value> {
        self.json["fields"].as_array().cloned().unwrap_or_default()
    }
    /// Names of the non-system fields of these types (any type when `types` is empty).
    fn names(&self, types: &[&str]) -> Vec<String> {
        self.fields()
            .iter()
            .filter(|f| types.is_empty() || types.contains(&f["type"].as_str().unwrap_or("")))
            .filter_map(|f| f["name"].as_str().map(str::to_owned))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// name pools

const WORDS: &[&str] = &[
    "posts", "tags", "notes", "items", "people", "orders", "Events", "logs", "cats", "x",
];

const RESERVED_COLLECTION_NAMES: &[&str] = &[
    "_collections",
    "_migrations",
    "_params",
    "_Collections",
    "users",
    "USERS",
    "_superusers",
    "_externalAuths",
    "_mfas",
    "_otps",
    "_authOrigins",
    "sqlite_master",
    "sqlite_x",
    "SQLITE_y",
    "sqlite",
];

const UNICODE_NAMES: &[&str] = &["café", "日本語", "naïve_x", "Ünï", "emoji🎉", "ß"];

const PUNCTUATED_NAMES: &[&str] = &[
    "a-b",
    "a b",
    "a.b",
    "a'b",
    "a\"b",
    "a;DROP TABLE users;--",
    "a\u{0}b",
    "(x)",
    "x/y",
    "x%y",
    " lead",
    "trail ",
    "tab\tx",
    "a`b",
    "a[0]",
    "x:y",
    "@x",
    "a,b",
];

const SQL_NAMES: &[&str] = &[
    "select", "table", "where", "order", "group", "index", "values", "from", "rowid", "oid",
    "_rowid_", "null", "true", "default",
];

const RESERVED_FIELD_NAMES: &[&str] = &[
    "null",
    "true",
    "false",
    "_rowid_",
    "collectionId",
    "collectionName",
    "expand",
    "id",
    "created",
    "updated",
    "passwordConfirm",
    "oldPassword",
    "a_via_b",
    "_via_",
    "rowid",
    "email",
    "password",
    "tokenKey",
    "verified",
    "emailVisibility",
    "Expand",
    "NULL",
];

const FIELD_WORDS: &[&str] = &[
    "title", "body", "n", "count", "flag", "when", "kind", "tags", "meta", "loc", "owner", "ref",
    "secret", "site", "mail", "pic", "pw", "stamp", "Title", "a1", "_x",
];

const TYPES: &[(&str, usize)] = &[
    ("text", 14),
    ("number", 9),
    ("bool", 5),
    ("email", 4),
    ("url", 4),
    ("editor", 3),
    ("date", 5),
    ("autodate", 3),
    ("select", 7),
    ("file", 3),
    ("relation", 8),
    ("json", 5),
    ("geoPoint", 3),
    ("password", 3),
    ("wat", 1),
    ("", 1),
];

// ---------------------------------------------------------------------------------------------
// the generator

/// One step: a request and what it is about.
struct Case {
    op: &'static str,
    method: &'static str,
    path: String,
    body: Option<Value>,
    /// The collection the step is about (its id), if any.
    coll: Option<String>,
    /// A record created by this step (collection id, record id).
    new_record: Option<(String, String)>,
}

impl Case {
    fn text(&self) -> String {
        let body = self
            .body
            .as_ref()
            .map(|b| clip(&b.to_string(), 700))
            .unwrap_or_default();
        format!(
            "[{}] {} {} {body}",
            self.op,
            self.method,
            clip(&self.path, 200)
        )
    }
    fn changes_schema(&self) -> bool {
        !self.op.starts_with("record")
    }
}

struct Gen {
    r: Rng,
    used: HashSet<String>,
    colls: Vec<Coll>,
    emails: usize,
    /// The step being generated draws only valid names and options.
    clean: bool,
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl Gen {
    fn collection_name(&mut self) -> String {
        let existing: Vec<String> = self.colls.iter().map(Coll::name).collect();
        if self.clean {
            return format!("{}{}", self.r.pick(WORDS), self.r.below(1000));
        }
        match self.r.below(100) {
            0..=57 => format!("{}{}", self.r.pick(WORDS), self.r.below(1000)),
            58..=63 => (*self.r.pick(RESERVED_COLLECTION_NAMES)).to_owned(),
            64..=67 => (*self.r.pick(UNICODE_NAMES)).to_owned(),
            68..=75 => (*self.r.pick(PUNCTUATED_NAMES)).to_owned(),
            76..=78 => String::new(),
            79..=83 => "n".repeat(*self.r.pick(&[100, 101, 255, 256, 10_000])),
            84..=87 => (*self.r.pick(SQL_NAMES)).to_owned(),
            88..=93 if !existing.is_empty() => {
                let n = self.r.pick(&existing).clone();
                if self.r.pct(50) { n.to_uppercase() } else { n }
            }
            _ => (*self
                .r
                .pick(&["1abc", "_x1", "___", "9", "a_b_c", "CamelCase"]))
            .to_owned(),
        }
    }

    fn field_name(&mut self, taken: &[String]) -> String {
        let k = if self.clean { 0 } else { self.r.below(100) };
        match k {
            0..=69 => {
                let base = *self.r.pick(FIELD_WORDS);
                let mut n = base.to_owned();
                let mut i = 2;
                while taken.iter().any(|t| t.eq_ignore_ascii_case(&n)) {
                    n = format!("{base}{i}");
                    i += 1;
                }
                n
            }
            70..=79 => (*self.r.pick(RESERVED_FIELD_NAMES)).to_owned(),
            80..=83 => (*self.r.pick(UNICODE_NAMES)).to_owned(),
            84..=89 => (*self.r.pick(PUNCTUATED_NAMES)).to_owned(),
            90..=91 => String::new(),
            92..=94 => "f".repeat(*self.r.pick(&[100, 101, 10_000])),
            95..=97 if !taken.is_empty() => self.r.pick(taken).clone(),
            _ => (*self.r.pick(SQL_NAMES)).to_owned(),
        }
    }

    fn field_type(&mut self) -> &'static str {
        let total: usize = TYPES.iter().map(|t| t.1).sum();
        let mut k = self.r.below(total);
        for (t, w) in TYPES {
            if k < *w {
                return t;
            }
            k -= w;
        }
        "text"
    }

    /// Collection ids a relation may name: the episode's, users, a missing one, `own` (the id
    /// the collection being defined will have, when known).
    fn relation_target(&mut self, own: Option<&str>) -> Value {
        let mut pool: Vec<String> = self.colls.iter().map(Coll::id).collect();
        pool.push(USERS_ID.into());
        pool.push("users".into());
        if let Some(o) = own {
            pool.push(o.to_owned());
            pool.push(o.to_owned());
        }
        match self.r.below(20) {
            0 => json!("pbc_missing00001"),
            1 => json!(""),
            2 => json!(5),
            _ => json!(self.r.pick(&pool)),
        }
    }

    /// One field definition of type `kind` with valid (mostly) and invalid options.
    fn field_def(&mut self, name: &str, kind: &str, own: Option<&str>) -> Value {
        let r = &mut self.r;
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        m.insert("type".into(), json!(kind));
        let ints = [
            json!(0),
            json!(1),
            json!(3),
            json!(5),
            json!(15),
            json!(100),
            json!(-1),
        ];
        match kind {
            "text" => {
                if r.pct(40) {
                    m.insert("min".into(), r.pick(&ints).clone());
                }
                if r.pct(40) {
                    m.insert("max".into(), r.pick(&ints).clone());
                }
                if r.pct(25) {
                    let p = *r.pick(&[
                        "^[a-z]+$",
                        "\\d+",
                        "^.{0,3}$",
                        "(",
                        "[a-",
                        "(?=a)",
                        "^\\p{L}+$",
                        "a{2,1}",
                    ]);
                    m.insert("pattern".into(), json!(p));
                }
                if r.pct(20) {
                    // Every pattern here produces values of one length and one character
                    // class, so whether the ten samples PocketBase (and ferrobase) draw satisfy
                    // the field is the same on every draw (`a*` or `[a-z0-9]{15}` with some
                    // min/max/pattern settings are accepted or refused at random).
                    let p = *r.pick(&[
                        "[a-z]{5}",
                        "[a-z]{10}[0-9]{5}",
                        "(",
                        "x[0-9]{3}",
                        "a{4}",
                        "",
                    ]);
                    m.insert("autogeneratePattern".into(), json!(p));
                }
                if r.pct(5) {
                    m.insert("primaryKey".into(), json!(true));
                }
            }
            "number" => {
                let bounds = [
                    json!(null),
                    json!(0),
                    json!(-10),
                    json!(10),
                    json!(1.5),
                    json!(1e308),
                ];
                if r.pct(40) {
                    m.insert("min".into(), r.pick(&bounds).clone());
                }
                if r.pct(40) {
                    m.insert("max".into(), r.pick(&bounds).clone());
                }
                if r.pct(30) {
                    m.insert("onlyInt".into(), json!(r.pct(50)));
                }
            }
            "email" | "url" => {
                let lists = [
                    json!([]),
                    json!(["allowed.com"]),
                    json!(["not a domain"]),
                    json!([""]),
                    json!(["Allowed.COM", "x.y"]),
                ];
                if r.pct(30) {
                    m.insert("onlyDomains".into(), r.pick(&lists).clone());
                }
                if r.pct(30) {
                    m.insert("exceptDomains".into(), json!(["blocked.com"]));
                }
            }
            "editor" => {
                if r.pct(40) {
                    m.insert(
                        "maxSize".into(),
                        r.pick(&[json!(0), json!(10), json!(100), json!(-1)])
                            .clone(),
                    );
                }
                if r.pct(30) {
                    m.insert("convertURLs".into(), json!(true));
                }
            }
            "date" => {
                let dates = [
                    "",
                    "2020-01-01",
                    "2025-01-01 00:00:00.000Z",
                    "garbage",
                    "2030-01-01",
                ];
                if r.pct(30) {
                    m.insert("min".into(), json!(r.pick(&dates)));
                }
                if r.pct(30) {
                    m.insert("max".into(), json!(r.pick(&dates)));
                }
            }
            "autodate" => {
                m.insert("onCreate".into(), json!(r.pct(70)));
                m.insert("onUpdate".into(), json!(r.pct(50)));
            }
            "select" => {
                let values = [
                    json!(["a", "b", "c"]),
                    json!(["a", "b", "c"]),
                    json!(["red", "green"]),
                    json!([]),
                    json!(["a", "a"]),
                    json!(["", "x"]),
                    json!(["日本", "é"]),
                    json!([1, 2]),
                ];
                if r.pct(92) {
                    m.insert("values".into(), r.pick(&values).clone());
                }
                if r.pct(70) {
                    m.insert(
                        "maxSelect".into(),
                        r.pick(&[json!(0), json!(1), json!(2), json!(3), json!(5), json!(-1)])
                            .clone(),
                    );
                }
            }
            "file" => {
                if r.pct(50) {
                    m.insert(
                        "maxSelect".into(),
                        r.pick(&[json!(0), json!(1), json!(3), json!(-2)]).clone(),
                    );
                }
                if r.pct(30) {
                    m.insert(
                        "maxSize".into(),
                        r.pick(&[json!(0), json!(1024), json!(-5)]).clone(),
                    );
                }
                if r.pct(25) {
                    m.insert(
                        "mimeTypes".into(),
                        r.pick(&[json!(["image/png"]), json!(["bogus"]), json!([""])])
                            .clone(),
                    );
                }
                if r.pct(25) {
                    m.insert(
                        "thumbs".into(),
                        r.pick(&[
                            json!(["100x100", "0x50"]),
                            json!(["abc"]),
                            json!(["100x100f"]),
                            json!(["0x0"]),
                        ])
                        .clone(),
                    );
                }
                if r.pct(20) {
                    m.insert("protected".into(), json!(true));
                }
            }
            "json" if r.pct(40) => {
                m.insert(
                    "maxSize".into(),
                    r.pick(&[json!(0), json!(10), json!(100), json!(-5)])
                        .clone(),
                );
            }
            "password" => {
                if r.pct(40) {
                    m.insert("min".into(), r.pick(&ints).clone());
                }
                if r.pct(30) {
                    m.insert(
                        "max".into(),
                        r.pick(&[json!(0), json!(8), json!(72), json!(100)]).clone(),
                    );
                }
                if r.pct(30) {
                    m.insert(
                        "cost".into(),
                        // Valid costs stay cheap: both servers hash a password as it is set,
                        // and bcrypt at cost 31 takes days.
                        r.pick(&[json!(4), json!(5), json!(32), json!(3), json!(-1)])
                            .clone(),
                    );
                }
                if r.pct(15) {
                    m.insert("pattern".into(), json!(r.pick(&["^[a-z]+$", "("])));
                }
            }
            _ => {}
        }
        if kind == "relation" {
            let target = self.relation_target(own);
            m.insert("collectionId".into(), target);
            let r = &mut self.r;
            if r.pct(60) {
                m.insert(
                    "maxSelect".into(),
                    r.pick(&[json!(0), json!(1), json!(2), json!(5), json!(-1)])
                        .clone(),
                );
            }
            if r.pct(25) {
                m.insert(
                    "minSelect".into(),
                    r.pick(&[json!(0), json!(1), json!(3), json!(-1)]).clone(),
                );
            }
            if r.pct(25) {
                m.insert("cascadeDelete".into(), json!(true));
            }
        }
        let r = &mut self.r;
        if kind != "autodate" && r.pct(20) {
            m.insert("required".into(), json!(true));
        }
        if r.pct(8) {
            m.insert("hidden".into(), json!(true));
        }
        if r.pct(8) {
            m.insert("presentable".into(), json!(true));
        }
        if r.pct(4) {
            m.insert("help".into(), json!("some help"));
        }
        if r.pct(3) {
            m.insert("system".into(), json!(true));
        }
        if r.pct(4) {
            // An option of the wrong JSON type.
            let key = *r.pick(&[
                "required",
                "max",
                "min",
                "maxSelect",
                "values",
                "hidden",
                "onlyInt",
                "maxSize",
                "name",
                "help",
                "cascadeDelete",
                "pattern",
            ]);
            let v = r
                .pick(&[
                    json!("5"),
                    json!({"a": 1}),
                    json!([1]),
                    json!(1.5),
                    json!(null),
                    json!(true),
                ])
                .clone();
            m.insert(key.into(), v);
        }
        if r.pct(3) {
            m.insert("unknownOption".into(), json!(1));
        }
        Value::Object(m)
    }

    /// A field with valid options only (so that most clean steps succeed and later steps
    /// have collections and records to work on).
    fn clean_field_def(&mut self, name: &str, own: Option<&str>) -> Value {
        let kinds = [
            "text", "text", "number", "bool", "email", "url", "editor", "date", "select", "select",
            "relation", "relation", "json", "geoPoint", "autodate", "file",
        ];
        let kind = *self.r.pick(&kinds);
        let mut f = json!({"name": name, "type": kind});
        let r = &mut self.r;
        match kind {
            "text" if r.pct(30) => f["max"] = json!(*r.pick(&[3, 10, 100])),
            "number" if r.pct(30) => {
                f["min"] = json!(-10);
                f["max"] = json!(100);
                f["onlyInt"] = json!(r.pct(50));
            }
            "select" => {
                f["values"] = json!(["a", "b", "c"]);
                f["maxSelect"] = json!(*r.pick(&[1, 2, 3]));
            }
            "autodate" => {
                f["onCreate"] = json!(true);
                f["onUpdate"] = json!(r.pct(50));
            }
            "file" => f["maxSelect"] = json!(*r.pick(&[1, 3])),
            _ => {}
        }
        if kind == "relation" {
            let mut pool: Vec<String> = self
                .colls
                .iter()
                .filter(|c| c.kind() != "view")
                .map(Coll::id)
                .collect();
            pool.push(USERS_ID.into());
            if let Some(o) = own {
                pool.push(o.to_owned());
            }
            f["collectionId"] = json!(self.r.pick(&pool));
            f["maxSelect"] = json!(*self.r.pick(&[1, 1, 3]));
            if self.r.pct(20) {
                f["cascadeDelete"] = json!(true);
            }
        }
        if kind != "autodate" && self.r.pct(15) {
            f["required"] = json!(true);
        }
        f
    }

    fn new_fields(&mut self, own: Option<&str>, auth: bool) -> Vec<Value> {
        let n = self.r.below(7);
        let mut names: Vec<String> = Vec::new();
        let mut out = Vec::new();
        for _ in 0..n {
            let name = self.field_name(&names);
            let f = if self.clean {
                self.clean_field_def(&name, own)
            } else {
                let kind = self.field_type();
                self.field_def(&name, kind, own)
            };
            out.push(f);
            names.push(name);
        }
        if self.r.pct(15) {
            // The id field sent explicitly, sometimes with other options or another type.
            let id = match self.r.below(4) {
                0 => json!({"name": "id", "type": "text"}),
                1 => {
                    json!({"name": "id", "type": "text", "pattern": "^[a-z]+$", "min": 3, "max": 20})
                }
                2 => json!({"name": "id", "type": "number"}),
                _ => {
                    json!({"name": "id", "type": "text", "autogeneratePattern": "", "primaryKey": true, "required": true})
                }
            };
            let at = self.r.below(out.len() + 1);
            out.insert(at, id);
        }
        if auth && self.r.pct(15) {
            out.push(json!({"name": "email", "type": "email", "required": false}));
        }
        if self.r.pct(15) {
            out.push(json!({"name": "created", "type": "autodate", "onCreate": true}));
            out.push(
                json!({"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true}),
            );
        }
        out
    }

    fn rule(&mut self, fields: &[String]) -> Value {
        let f = if fields.is_empty() {
            "id".to_owned()
        } else {
            self.r.pick(fields).clone()
        };
        let k = if self.clean {
            self.r.below(17)
        } else {
            self.r.below(30)
        };
        match k {
            0..=5 => Value::Null,
            6..=9 => json!(""),
            10 => json!("id != ''"),
            11 => json!("@request.auth.id != ''"),
            12 => json!(format!("{f} != ''")),
            13 => json!(format!("{f} = @request.auth.id")),
            14 => json!("@request.auth.collectionName = 'users'"),
            15 => json!("@collection.users.id ?= @request.auth.id"),
            16 => json!(format!("@request.body.{f} = ''")),
            17 => json!("nosuch = 1"),
            18 => json!("id ="),
            19 => json!("((("),
            20 => json!("@collection.nosuch.id = 1"),
            21 => json!(format!("{f}.nosuch = 1")),
            22 => json!(5),
            23 => json!("id = \"'; DROP TABLE users; --\""),
            24 => json!(format!("{f}:length > 1")),
            25 => json!("created > @now"),
            26 => json!("@request.auth.email ~ 'x'"),
            27 => json!(format!("{f}:isset = true")),
            28 => json!(format!("{f}_via_x.id != ''")),
            _ => json!("   "),
        }
    }

    fn rules(&mut self, m: &mut Map<String, Value>, fields: &[String], all: bool) {
        for key in [
            "listRule",
            "viewRule",
            "createRule",
            "updateRule",
            "deleteRule",
        ] {
            if all || self.r.pct(30) {
                let rule = self.rule(fields);
                m.insert(key.into(), rule);
            }
        }
    }

    fn index(&mut self, table: &str, fields: &[String]) -> Value {
        let f = if fields.is_empty() {
            "id".to_owned()
        } else {
            self.r.pick(fields).clone()
        };
        let g = if fields.is_empty() {
            "id".to_owned()
        } else {
            self.r.pick(fields).clone()
        };
        let n = self.r.below(100);
        let k = if self.clean {
            *self.r.pick(&[0, 4, 6, 12, 13, 15])
        } else {
            self.r.below(16)
        };
        let s = match k {
            0..=3 => format!("CREATE INDEX `idx_{n}` ON `{table}` (`{f}`)"),
            4..=5 => format!("CREATE UNIQUE INDEX idx_u{n} ON {table} ({f})"),
            6 => format!("CREATE UNIQUE INDEX `idx_m{n}` ON `{table}` (`{f}`, `{g}`)"),
            7 => format!("CREATE INDEX `idx_{n}` ON `{table}` (`nosuch`)"),
            8 => "CREATE INDEX `idx_other` ON `users` (`email`)".to_owned(),
            9 => "DROP TABLE users".to_owned(),
            10 => "not sql at all".to_owned(),
            11 => String::new(),
            12 => format!("CREATE INDEX `idx_l{n}` ON `{table}` (lower(`{f}`))"),
            13 => format!("CREATE INDEX `idx_p{n}` ON `{table}` (`{f}`) WHERE `{f}` != ''"),
            14 => format!("create index idx_{n} on {table} ({f}); DROP TABLE users"),
            _ => format!("CREATE INDEX IF NOT EXISTS `idx_{n}` ON `{table}` (`{f}` DESC)"),
        };
        json!(s)
    }

    fn create(&mut self) -> Case {
        self.clean = self.r.pct(45);
        let auth = self.r.pct(20);
        let mut m = Map::new();
        let name = self.collection_name();
        m.insert("name".into(), json!(name));
        let kind = if auth { "auth" } else { "base" };
        if !auth && self.r.pct(70) {
            // `type` left out is a base collection.
        } else {
            m.insert(
                "type".into(),
                if self.r.pct(4) {
                    json!(*self.r.pick(&["Base", "table", "", "view "]))
                } else {
                    json!(kind)
                },
            );
        }
        let own = if !self.clean && self.r.pct(25) {
            let id = match self.r.below(10) {
                0 => "bad id!".to_owned(),
                1 => "i".repeat(101),
                2 => USERS_ID.to_owned(),
                _ => format!("c{}", &self.r.id(&mut self.used)[..14]),
            };
            m.insert("id".into(), json!(id));
            Some(id)
        } else {
            None
        };
        let fields = self.new_fields(own.as_deref(), auth);
        let names: Vec<String> = fields
            .iter()
            .filter_map(|f| f["name"].as_str().map(str::to_owned))
            .collect();
        if !fields.is_empty() || self.r.pct(50) {
            m.insert("fields".into(), Value::Array(fields));
        }
        self.rules(&mut m, &names, false);
        if self.r.pct(25) {
            let n = 1 + self.r.below(2);
            let idx: Vec<Value> = (0..n).map(|_| self.index(&name, &names)).collect();
            m.insert("indexes".into(), Value::Array(idx));
        }
        if auth && self.r.pct(30) {
            self.auth_options(&mut m);
        }
        Case {
            op: if auth { "create auth" } else { "create base" },
            method: "POST",
            path: "/api/collections".into(),
            body: Some(Value::Object(m)),
            coll: None,
            new_record: None,
        }
    }

    fn auth_options(&mut self, m: &mut Map<String, Value>) {
        match self.r.below(10) {
            8 | 9 => {
                m.insert("oauth2".into(), self.oauth2());
            }
            0 => {
                m.insert("manageRule".into(), json!(""));
            }
            1 => {
                m.insert("manageRule".into(), json!("id != ''"));
            }
            2 => {
                m.insert("authRule".into(), json!("verified = true"));
            }
            3 => {
                m.insert(
                    "passwordAuth".into(),
                    json!({"enabled": true, "identityFields": ["email", "nosuch"]}),
                );
            }
            4 => {
                m.insert("authToken".into(), json!({"duration": 10}));
            }
            5 => {
                m.insert("authToken".into(), json!({"duration": -1}));
            }
            6 => {
                m.insert("otp".into(), json!({"enabled": true, "length": 3}));
            }
            _ => {
                m.insert("mfa".into(), json!({"enabled": true, "duration": 0}));
            }
        }
    }

    /// OAuth2 options: known, unknown, empty and repeated provider names, missing client ids
    /// and secrets, good and bad URLs, enabled or not.
    fn oauth2(&mut self) -> Value {
        const NAMES: &[&str] = &[
            "google", "github", "oidc2", "facebook", "nope", "", "Google",
        ];
        const URLS: &[&str] = &[
            "",
            "https://id.example.com/auth",
            "http://localhost:9000/token",
            "not a url",
            "ftp//x",
            "example.com/path",
            "https://",
        ];
        let providers: Vec<Value> = (0..self.r.below(4))
            .map(|_| {
                let mut p = Map::new();
                p.insert("name".into(), json!(self.r.pick(NAMES)));
                for k in ["clientId", "clientSecret"] {
                    if self.r.pct(75) {
                        p.insert(k.into(), json!(if self.r.pct(90) { "x1" } else { "" }));
                    }
                }
                for k in ["authURL", "tokenURL", "userInfoURL"] {
                    if self.r.pct(30) {
                        p.insert(k.into(), json!(self.r.pick(URLS)));
                    }
                }
                Value::Object(p)
            })
            .collect();
        json!({"enabled": self.r.pct(80), "providers": providers})
    }

    fn view_query(&mut self) -> String {
        let tables: Vec<&Coll> = self.colls.iter().collect();
        let (c, f) = match tables.get(self.r.below(tables.len().max(1))) {
            Some(c) => {
                let names = c.names(&[]);
                let f = names
                    .iter()
                    .filter(|n| *n != "id")
                    .cloned()
                    .collect::<Vec<_>>();
                let f = if f.is_empty() {
                    "id".to_owned()
                } else {
                    self.r.pick(&f).clone()
                };
                (c.name(), f)
            }
            None => ("users".to_owned(), "email".to_owned()),
        };
        let other = match tables.get(self.r.below(tables.len().max(1))) {
            Some(c) => c.name(),
            None => "users".to_owned(),
        };
        match self.r.below(26) {
            0..=3 => format!("SELECT id, {f} FROM {c}"),
            4 => format!("SELECT id, {f} AS renamed FROM {c}"),
            5 => format!("SELECT {c}.id, {c}.{f} FROM {c}"),
            6 => format!("SELECT (ROW_NUMBER() OVER()) as id, count(*) as total FROM {c}"),
            7 => format!("SELECT id, ({f} || '!') as x FROM {c}"),
            8 => format!("SELECT a.id, b.{f} FROM {c} a LEFT JOIN {other} b ON a.id = b.id"),
            9 => format!("SELECT {f} FROM {c}"),
            10 => format!("SELECT * FROM {c}"),
            11 => "SELECT id FROM nosuch".to_owned(),
            12 => format!("DELETE FROM {c}"),
            13 => format!("SELECT id FROM {c}; DROP TABLE {other}"),
            14 => String::new(),
            15 => "   ".to_owned(),
            16 => format!("SELECT id, max({f}) as m FROM {c} GROUP BY id"),
            17 => format!("SELECT id, cast({f} as int) as n FROM {c}"),
            18 => "select id, email, verified from users".to_owned(),
            19 => format!("SELECT id, created FROM {c}"),
            20 => format!("WITH x AS (SELECT id FROM {c}) SELECT id FROM x"),
            21 => format!("SELECT id, {f} FROM {c} WHERE {f} != ''"),
            22 => "SELECT 1 as id".to_owned(),
            23 => format!("SELECT id, {f} FROM `{c}` ORDER BY {f} LIMIT 5"),
            24 => format!("SELECT id, title || '!' as t FROM {c}"),
            _ => format!("SELECT id, (SELECT COUNT(*) FROM {other}) as c FROM {c}"),
        }
    }

    fn create_view(&mut self) -> Case {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.collection_name()));
        m.insert("type".into(), json!("view"));
        let q = self.view_query();
        if !self.r.pct(3) {
            m.insert("viewQuery".into(), json!(q));
        }
        self.rules(&mut m, &[], false);
        if self.r.pct(10) {
            m.insert("fields".into(), json!([{"name": "x", "type": "text"}]));
        }
        if self.r.pct(5) {
            m.insert("indexes".into(), json!(["CREATE INDEX idx_v ON v (id)"]));
        }
        Case {
            op: "create view",
            method: "POST",
            path: "/api/collections".into(),
            body: Some(Value::Object(m)),
            coll: None,
            new_record: None,
        }
    }

    /// A field list changed in one way from `c`'s.
    fn changed_fields(&mut self, c: &Coll) -> (&'static str, Vec<Value>) {
        let mut fields = c.fields();
        let own = c.id();
        let taken: Vec<String> = c.names(&[]);
        let custom: Vec<usize> = fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f["system"] != json!(true))
            .map(|(i, _)| i)
            .collect();
        let pick_custom = |r: &mut Rng| (!custom.is_empty()).then(|| *r.pick(&custom));
        let k = self.r.below(100);
        match k {
            0..=24 => {
                let name = self.field_name(&taken);
                let mut f = if self.clean {
                    self.clean_field_def(&name, Some(&own))
                } else {
                    let kind = self.field_type();
                    self.field_def(&name, kind, Some(&own))
                };
                if !c.records.is_empty() && self.r.pct(50) {
                    f["required"] = json!(true);
                }
                fields.push(f);
                ("update: add field", fields)
            }
            25..=34 => match pick_custom(&mut self.r) {
                Some(i) => {
                    fields.remove(i);
                    ("update: remove field", fields)
                }
                None => ("update: same fields", fields),
            },
            35..=39 => {
                // a system field removed (or the id)
                let sys: Vec<usize> = fields
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f["system"] == json!(true))
                    .map(|(i, _)| i)
                    .collect();
                if let Some(&i) = sys.get(self.r.below(sys.len().max(1))) {
                    fields.remove(i);
                }
                ("update: remove system field", fields)
            }
            40..=49 => {
                let i = if self.r.pct(85) {
                    pick_custom(&mut self.r)
                } else {
                    Some(self.r.below(fields.len().max(1)))
                };
                if let Some(i) = i
                    && i < fields.len()
                {
                    let name = self.field_name(&taken);
                    fields[i]["name"] = json!(name);
                }
                ("update: rename field", fields)
            }
            50..=57 => {
                if let Some(i) = pick_custom(&mut self.r) {
                    let kind = self.field_type();
                    let name = fields[i]["name"].as_str().unwrap_or("").to_owned();
                    let mut f = self.field_def(&name, kind, Some(&own));
                    f["id"] = fields[i]["id"].clone();
                    fields[i] = f;
                }
                ("update: change field type", fields)
            }
            58..=79 => {
                if let Some(i) = pick_custom(&mut self.r) {
                    let f = &mut fields[i];
                    let kind = f["type"].as_str().unwrap_or("").to_owned();
                    let r = &mut self.r;
                    match r.below(10) {
                        0..=2 => f["required"] = json!(f["required"] != json!(true)),
                        3 => f["hidden"] = json!(f["hidden"] != json!(true)),
                        _ => match kind.as_str() {
                            "select" => {
                                f["maxSelect"] = r.pick(&[json!(1), json!(3), json!(0)]).clone();
                                if r.pct(30) {
                                    f["values"] = json!(["a", "z"]);
                                }
                            }
                            "relation" => {
                                f["maxSelect"] = r.pick(&[json!(1), json!(3), json!(0)]).clone();
                                if r.pct(20) {
                                    f["cascadeDelete"] = json!(true);
                                }
                            }
                            "file" => f["maxSelect"] = r.pick(&[json!(1), json!(3)]).clone(),
                            "text" => {
                                f["max"] = r.pick(&[json!(0), json!(3), json!(-1)]).clone();
                                if r.pct(30) {
                                    f["pattern"] = json!(r.pick(&["^[a-z]+$", "(", ""]));
                                }
                            }
                            "number" => {
                                f["onlyInt"] = json!(r.pct(50));
                                f["max"] = r.pick(&[json!(null), json!(5), json!(-5)]).clone();
                            }
                            "autodate" => {
                                f["onCreate"] = json!(false);
                                f["onUpdate"] = json!(r.pct(50));
                            }
                            "password" => f["cost"] = r.pick(&[json!(4), json!(40)]).clone(),
                            "json" | "editor" => {
                                f["maxSize"] = r.pick(&[json!(5), json!(0)]).clone()
                            }
                            _ => f["presentable"] = json!(true),
                        },
                    }
                }
                ("update: change field options", fields)
            }
            80..=84 => {
                // a second field under an existing name
                if !taken.is_empty() {
                    let name = self.r.pick(&taken).clone();
                    let kind = self.field_type();
                    let f = self.field_def(&name, kind, Some(&own));
                    fields.push(f);
                }
                ("update: duplicate field name", fields)
            }
            85..=92 => {
                // the fields sent without their ids, by name only
                for f in &mut fields {
                    if let Value::Object(o) = f {
                        o.remove("id");
                    }
                }
                if self.r.pct(50) {
                    fields.retain(|f| f["system"] != json!(true));
                }
                ("update: fields without ids", fields)
            }
            _ => {
                // order changed
                fields.reverse();
                ("update: fields reordered", fields)
            }
        }
    }

    fn update(&mut self) -> Case {
        self.clean = self.r.pct(40);
        let i = self.r.below(self.colls.len());
        let c = self.colls[i].clone();
        let id = c.id();
        let path = if self.r.pct(20) {
            format!("/api/collections/{}", enc(&c.name()))
        } else {
            format!("/api/collections/{id}")
        };
        let mut m = Map::new();
        let view = c.kind() == "view";
        let op: &'static str = match self.r.below(100) {
            0..=9 => {
                m.insert("name".into(), json!(self.collection_name()));
                "update: rename collection"
            }
            10..=19 => {
                let names = c.names(&[]);
                self.rules(&mut m, &names, false);
                if m.is_empty() {
                    let rule = self.rule(&names);
                    m.insert("listRule".into(), rule);
                }
                "update: rules"
            }
            20..=29 => {
                let names = c.names(&[]);
                let table = c.name();
                let mut list: Vec<Value> =
                    c.json["indexes"].as_array().cloned().unwrap_or_default();
                if self.r.pct(30) && !list.is_empty() {
                    list.remove(self.r.below(list.len()));
                } else {
                    list.push(self.index(&table, &names));
                }
                m.insert("indexes".into(), Value::Array(list));
                "update: indexes"
            }
            30..=33 => {
                let t = *self.r.pick(&["base", "auth", "view", "nope"]);
                m.insert("type".into(), json!(t));
                "update: collection type"
            }
            34..=38 => {
                m = obj(c.json.clone());
                "update: own JSON sent back"
            }
            39..=41 => {
                m.insert("id".into(), json!("pbc_other0000001"));
                m.insert("name".into(), json!(format!("{}x", c.name())));
                "update: another id in the body"
            }
            _ if view => {
                m.insert("viewQuery".into(), json!(self.view_query()));
                if self.r.pct(10) {
                    m.insert("fields".into(), json!([]));
                }
                "update: view query"
            }
            _ => {
                let (op, fields) = self.changed_fields(&c);
                m.insert("fields".into(), Value::Array(fields));
                op
            }
        };
        if c.kind() == "auth" && self.r.pct(10) {
            self.auth_options(&mut m);
        }
        Case {
            op,
            method: "PATCH",
            path,
            body: Some(Value::Object(m)),
            coll: Some(id),
            new_record: None,
        }
    }

    fn system_update(&mut self) -> Case {
        let (op, path, body) = match self.r.below(8) {
            0 => (
                "system: rename _superusers",
                "/api/collections/_superusers",
                json!({"name": "admins"}),
            ),
            1 => (
                "system: remove system fields of users",
                "/api/collections/users",
                json!({"fields": [{"name": "name", "type": "text"}]}),
            ),
            2 => (
                "system: rename a system field",
                "/api/collections/users",
                json!({"fields": [{"id": "email3885137012", "name": "mail", "type": "email", "system": true}]}),
            ),
            3 => (
                "system: retype a system field",
                "/api/collections/_superusers",
                json!({"fields": [{"id": "email3885137012", "name": "email", "type": "text", "system": true}]}),
            ),
            4 => (
                "system: _externalAuths rules",
                "/api/collections/_externalAuths",
                json!({"listRule": "nosuch = 1"}),
            ),
            5 => (
                "system: change type of users",
                "/api/collections/users",
                json!({"type": "base"}),
            ),
            6 => (
                "system: missing collection",
                "/api/collections/nosuchcollection",
                json!({"name": "x"}),
            ),
            _ => (
                "system: _mfas rename",
                "/api/collections/_mfas",
                json!({"name": "mfas2"}),
            ),
        };
        Case {
            op,
            method: "PATCH",
            path: path.into(),
            body: Some(body),
            coll: None,
            new_record: None,
        }
    }

    fn delete(&mut self) -> Case {
        let (op, path, coll) = match self.r.below(10) {
            0 => (
                "delete: system",
                "/api/collections/_superusers".to_owned(),
                None,
            ),
            1 => (
                "delete: missing",
                "/api/collections/nosuch".to_owned(),
                None,
            ),
            _ if !self.colls.is_empty() => {
                let c = self.r.pick(&self.colls).clone();
                (
                    "delete",
                    format!("/api/collections/{}", c.id()),
                    Some(c.id()),
                )
            }
            _ => (
                "delete: missing",
                "/api/collections/nosuch2".to_owned(),
                None,
            ),
        };
        Case {
            op,
            method: "DELETE",
            path,
            body: None,
            coll,
            new_record: None,
        }
    }

    fn truncate(&mut self) -> Case {
        let c = self.r.pick(&self.colls).clone();
        Case {
            op: "truncate",
            method: "DELETE",
            path: format!("/api/collections/{}/truncate", c.id()),
            body: None,
            coll: Some(c.id()),
            new_record: None,
        }
    }

    fn import(&mut self) -> Case {
        let mut list: Vec<Value> = Vec::new();
        if let Some(c) = self
            .colls
            .get(self.r.below(self.colls.len().max(1)))
            .cloned()
        {
            let mut j = obj(c.json.clone());
            if self.r.pct(50) {
                let (_, fields) = self.changed_fields(&c);
                j.insert("fields".into(), Value::Array(fields));
            }
            list.push(Value::Object(j));
        }
        if self.r.pct(60) {
            let Case { body, .. } = self.create();
            list.push(body.unwrap_or_default());
        }
        if self.r.pct(10) {
            list.push(json!({"name": "bad", "fields": [{"name": "x", "type": "wat"}]}));
        }
        Case {
            op: "import",
            method: "PUT",
            path: "/api/collections/import".into(),
            body: Some(json!({"collections": list, "deleteMissing": false})),
            coll: None,
            new_record: None,
        }
    }

    /// Values for some of `c`'s fields.
    fn record_body(&mut self, c: &Coll, all: bool) -> Map<String, Value> {
        let mut m = Map::new();
        for f in c.fields() {
            let name = f["name"].as_str().unwrap_or("").to_owned();
            if name == "id" || !(all && self.r.pct(70) || self.r.pct(25)) {
                continue;
            }
            let target = f["collectionId"].as_str().unwrap_or("").to_owned();
            let rel: Vec<String> = self
                .colls
                .iter()
                .find(|t| t.id() == target || t.name() == target)
                .map(|t| t.records.clone())
                .unwrap_or_default();
            let v = sample_value(&mut self.r, &f, &rel);
            m.insert(name, v);
        }
        m
    }

    fn record_create(&mut self) -> Case {
        let tables: Vec<Coll> = self
            .colls
            .iter()
            .filter(|c| c.kind() != "view")
            .cloned()
            .collect();
        let c = self.r.pick(&tables).clone();
        let mut m = self.record_body(&c, true);
        let rid = self.r.id(&mut self.used);
        m.insert("id".into(), json!(rid));
        if c.kind() == "auth" && self.r.pct(85) {
            self.emails += 1;
            m.insert(
                "email".into(),
                json!(format!("u{}@example.com", self.emails)),
            );
            m.insert("password".into(), json!("password123"));
            m.insert("passwordConfirm".into(), json!("password123"));
        }
        Case {
            op: "record create",
            method: "POST",
            path: format!("/api/collections/{}/records", c.id()),
            body: Some(Value::Object(m)),
            coll: Some(c.id()),
            new_record: Some((c.id(), rid)),
        }
    }

    fn record_update(&mut self) -> Case {
        let with: Vec<Coll> = self
            .colls
            .iter()
            .filter(|c| !c.records.is_empty())
            .cloned()
            .collect();
        let c = self.r.pick(&with).clone();
        let rid = self.r.pick(&c.records).clone();
        let body = if self.r.pct(30) {
            Map::new()
        } else {
            self.record_body(&c, false)
        };
        Case {
            op: "record update",
            method: "PATCH",
            path: format!("/api/collections/{}/records/{rid}", c.id()),
            body: Some(Value::Object(body)),
            coll: Some(c.id()),
            new_record: None,
        }
    }

    fn next(&mut self) -> Case {
        let tables = self.colls.iter().filter(|c| c.kind() != "view").count();
        let with_records = self.colls.iter().any(|c| !c.records.is_empty());
        loop {
            let k = self.r.below(100);
            let case = match k {
                0..=19 => self.create(),
                20..=25 if !self.colls.is_empty() => self.create_view(),
                26..=52 if !self.colls.is_empty() => self.update(),
                53..=69 if tables > 0 => self.record_create(),
                70..=79 if with_records => self.record_update(),
                80..=83 => self.delete(),
                84..=85 if !self.colls.is_empty() => self.truncate(),
                86..=88 => self.system_update(),
                89..=90 => self.import(),
                _ if self.colls.len() < 2 => self.create(),
                _ => continue,
            };
            return case;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// normalising and comparing

/// Timestamps and the random ids of view fields cloned from a source field; the e-mail
/// templates' bodies (ferrobase's wording is its own, with PocketBase's placeholders: see
/// ARCHITECTURE.md, "Decisions").
fn norm_collection(v: &Value) -> Value {
    let mut v = canonical(v);
    if let Value::Object(m) = &mut v {
        for k in ["created", "updated"] {
            if m.contains_key(k) {
                m.insert(k.into(), json!("<time>"));
            }
        }
        if let Some(Value::Array(fields)) = m.get_mut("fields") {
            for f in fields {
                if f["id"].as_str().is_some_and(|s| s.starts_with("_clone_")) {
                    f["id"] = json!("_clone_<random>");
                }
            }
        }
        for k in [
            "verificationTemplate",
            "resetPasswordTemplate",
            "confirmEmailChangeTemplate",
        ] {
            if let Some(t) = m.get_mut(k).and_then(Value::as_object_mut) {
                t.insert("body".into(), json!("<our wording>"));
            }
        }
        for k in ["authAlert", "otp"] {
            if let Some(t) = m
                .get_mut(k)
                .and_then(|o| o.get_mut("emailTemplate"))
                .and_then(Value::as_object_mut)
            {
                t.insert("body".into(), json!("<our wording>"));
            }
        }
    }
    v
}

/// A record with its autodate values (server time) blanked.
fn norm_record(v: &Value, coll: Option<&Value>) -> Value {
    let mut v = canonical(v);
    let autodates: Vec<String> = coll
        .and_then(|c| c["fields"].as_array())
        .map(|fs| {
            fs.iter()
                .filter(|f| f["type"] == "autodate")
                .filter_map(|f| f["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Value::Object(m) = &mut v {
        for k in autodates {
            if let Some(Value::String(s)) = m.get(&k)
                && !s.is_empty()
            {
                m.insert(k, json!("<time>"));
            }
        }
        // A view column computed from an autodate (`created || '!'`) is text: the moment each
        // server wrote the record shows there too. The generator's own dates are never today's.
        for (_, x) in m.iter_mut() {
            if let Value::String(s) = x {
                *s = mask_todays_stamps(s);
            }
        }
    }
    v
}

/// Timestamps of today (UTC, PocketBase's `2006-01-02 15:04:05.000Z` form) in `s` as `<time>`.
fn mask_todays_stamps(s: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Yesterday too, for a run across midnight.
    let days: Vec<String> = [secs / 86_400, (secs / 86_400).saturating_sub(1)]
        .iter()
        .map(|&d| civil_date(d))
        .collect();
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let stamp = b.get(i..i + 24).filter(|w| {
            w.iter().enumerate().all(|(j, &c)| match j {
                4 | 7 => c == b'-',
                10 => c == b' ',
                13 | 16 => c == b':',
                19 => c == b'.',
                23 => c == b'Z',
                _ => c.is_ascii_digit(),
            })
        });
        match stamp {
            Some(w) if days.iter().any(|d| w.starts_with(d.as_bytes())) => {
                out.push_str("<time>");
                i += 24;
            }
            _ => {
                let ch = s[i..].chars().next().unwrap();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

#[test]
fn only_todays_stamps_are_masked() {
    assert_eq!(civil_date(0), "1970-01-01");
    assert_eq!(civil_date(20_425), "2025-12-03");
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let today = format!("{} 16:52:34.506Z!", civil_date(secs / 86_400));
    assert_eq!(mask_todays_stamps(&today), "<time>!");
    let fixed = "é 2024-05-06 05:08:09.000Z!";
    assert_eq!(mask_todays_stamps(fixed), fixed);
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (the proleptic Gregorian calendar).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The differences between two answers to the same step.
fn compare(a: &Reply, b: &Reply, norm: impl Fn(&Value) -> Value) -> Vec<String> {
    let mut out = Vec::new();
    if a.status != b.status {
        out.push(format!(
            "status: reference {} / ferrobase {}",
            a.status, b.status
        ));
        out.push(format!("reference: {}", clip(&a.body.to_string(), 600)));
        out.push(format!("ferrobase: {}", clip(&b.body.to_string(), 600)));
        return out;
    }
    if a.status >= 400 {
        let (ha, ma) = error_shape(&unordered_references(&a.body));
        let (hb, mb) = error_shape(&unordered_references(&b.body));
        let mut d = Vec::new();
        json_diffs(&ha, &hb, "error", &mut d, 12);
        json_diffs(&ma, &mb, "nested message", &mut d, 12);
        out.extend(d);
        return out;
    }
    if a.status == 200 {
        let mut d = Vec::new();
        json_diffs(&norm(&a.body), &norm(&b.body), "body", &mut d, 12);
        out.extend(d);
    }
    out
}

/// A refused collection delete names the collections that still refer to it in Go's map order
/// (random from run to run): the names are compared sorted.
fn unordered_references(body: &Value) -> Value {
    const LEAD: &str = "Failed to delete collection probably due to existing reference in ";
    let mut body = body.clone();
    if let Some(names) = body["message"]
        .as_str()
        .and_then(|m| m.strip_prefix(LEAD))
        .and_then(|m| m.strip_suffix('.'))
    {
        let mut names: Vec<&str> = names.split(", ").collect();
        names.sort_unstable();
        body["message"] = json!(format!("{LEAD}{}.", names.join(", ")));
    }
    body
}

/// The collection list (non-system-internal keys normalised), by id.
fn collections(r: &Reply) -> Vec<Value> {
    let mut items: Vec<Value> = r.body["items"].as_array().cloned().unwrap_or_default();
    items.sort_by(|x, y| x["id"].as_str().cmp(&y["id"].as_str()));
    items
}

fn is_episode_collection(c: &Value) -> bool {
    c["system"] != json!(true) && c["id"] != USERS_ID
}

const LIST: &str = "/api/collections?perPage=500&sort=id";

#[test]
fn collections_api_matches_pocketbase() {
    let started = Instant::now();
    let seed = super::seed();
    let n_cases = super::cases("DIFF_COLLECTION_CASES", DEFAULT_CASES);
    let Some(mut pair) = super::start_pair() else {
        return;
    };
    let subject = pair.subject_name;
    // `DIFF_TRACE=1` prints every step as it is sent (to replay an episode by hand).
    let trace = std::env::var("DIFF_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    println!("differential collections: seed={seed:#x} cases={n_cases} subject={subject}");
    let mut g = Gen {
        r: Rng::new(seed ^ 0xc011_ec71),
        used: HashSet::new(),
        colls: Vec::new(),
        emails: 0,
        clean: false,
    };
    let mut findings: Vec<Finding> = Vec::new();
    let (mut n, mut episodes, mut stuck_restarts) = (0usize, 0usize, 0usize);
    let mut statuses: std::collections::BTreeMap<(String, u16), usize> = Default::default();
    'episodes: while n < n_cases {
        episodes += 1;
        let steps = 5 + g.r.below(16);
        let mut diverged = false;
        // The episode's steps, named in the panic when its collections cannot be deleted.
        let mut episode: Vec<String> = Vec::new();
        for _ in 0..steps {
            if n >= n_cases {
                break;
            }
            let case = g.next();
            let bytes = case
                .body
                .as_ref()
                .map(|b| serde_json::to_vec(b).expect("json"));
            let (a, b) = pair.both(
                case.method,
                &case.path,
                (Auth::Su, Auth::Su),
                bytes.as_deref().map(|b| Body {
                    content_type: "application/json",
                    bytes: b,
                }),
            );
            *statuses.entry((case.op.to_owned(), a.status)).or_default() += 1;
            episode.push(format!("#{n} {} -> {}", clip(&case.text(), 600), a.status));
            if trace {
                // Whole, unlike the report's lines: a replay needs every byte of the body.
                let body = case.body.as_ref().map(Value::to_string).unwrap_or_default();
                println!(
                    "episode {episodes}: [{}] {} {} {body}",
                    case.op, case.method, case.path
                );
            }
            if case.op == "import" && a.status >= 400 {
                // PocketBase bug: a refused import leaves its refused definitions in
                // PocketBase's collection cache (the database is rolled back) until the next
                // collection save; meanwhile record writes on those collections fail with
                // "Failed to create record.". Ferrobase keeps the committed schema. An unchanged
                // save of `users` on both sides reloads PocketBase's cache, so the episode goes
                // on from what both committed.
                let _ = pair.su_json("PATCH", "/api/collections/users", Some(&json!({})));
                if trace {
                    println!(
                        "episode {episodes}: [cache reload] PATCH /api/collections/users {{}}"
                    );
                }
            }
            let coll_json = case
                .coll
                .as_ref()
                .and_then(|id| g.colls.iter().find(|c| &c.id() == id))
                .map(|c| c.json.clone());
            let mut details = if case.changes_schema() {
                compare(&a, &b, norm_collection)
            } else {
                compare(&a, &b, |v| norm_record(v, coll_json.as_ref()))
            };
            // The record this step created, as the reference kept it.
            if let Some((cid, rid)) = &case.new_record
                && a.status == 200
                && let Some(c) = g.colls.iter_mut().find(|c| &c.id() == cid)
            {
                c.records.push(rid.clone());
            }
            if case.changes_schema() && (a.status < 300 || b.status < 300) {
                let (la, lb) = pair.su_json("GET", LIST, None);
                let (ca, cb) = (collections(&la), collections(&lb));
                let mut d = Vec::new();
                json_diffs(
                    &Value::Array(ca.iter().map(norm_collection).collect()),
                    &Value::Array(cb.iter().map(norm_collection).collect()),
                    "collections",
                    &mut d,
                    12,
                );
                details.extend(d);
                // The model follows the reference.
                let old = std::mem::take(&mut g.colls);
                g.colls = ca
                    .into_iter()
                    .filter(is_episode_collection)
                    .map(|json| {
                        let id = json["id"].as_str().unwrap_or("").to_owned();
                        let records = old
                            .iter()
                            .find(|c| c.id() == id)
                            .map(|c| c.records.clone())
                            .unwrap_or_default();
                        Coll { json, records }
                    })
                    .collect();
                if case.op == "truncate" && a.status == 204 {
                    for c in g.colls.iter_mut() {
                        if Some(c.id()) == case.coll {
                            c.records.clear();
                        }
                    }
                }
                // The records of the collection it touched, and of every view.
                let touched: Vec<Coll> = g
                    .colls
                    .iter()
                    .filter(|c| Some(c.id()) == case.coll || c.kind() == "view")
                    .cloned()
                    .collect();
                for c in touched {
                    let path = format!("/api/collections/{}/records?perPage=500&sort=id", c.id());
                    let (ra, rb) = pair.su_json("GET", &path, None);
                    let norm = |v: &Value| {
                        let items = v["items"].as_array().cloned().unwrap_or_default();
                        Value::Array(
                            items
                                .iter()
                                .map(|i| norm_record(i, Some(&c.json)))
                                .collect(),
                        )
                    };
                    let mut d = Vec::new();
                    if ra.status != rb.status {
                        d.push(format!(
                            "records of {}: status {} / {}",
                            c.name(),
                            ra.status,
                            rb.status
                        ));
                    } else {
                        json_diffs(
                            &norm(&ra.body),
                            &norm(&rb.body),
                            &format!("records of {}", c.name()),
                            &mut d,
                            8,
                        );
                    }
                    details.extend(d);
                    // Records the reference no longer has (a required relation emptied, a
                    // cascade) are forgotten.
                    let ids: HashSet<String> = ra.body["items"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|i| i["id"].as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Some(m) = g.colls.iter_mut().find(|m| m.id() == c.id())
                        && ra.status == 200
                        && m.kind() != "view"
                    {
                        m.records.retain(|r| ids.contains(r));
                    }
                }
            }
            if !details.is_empty() {
                let text = case.text();
                let state_differs = (a.status < 300) != (b.status < 300)
                    || details
                        .iter()
                        .any(|d| d.starts_with("collections") || d.starts_with("records of"));
                findings.push(Finding {
                    case: n,
                    known: super::known_finding(KNOWN, KNOWN_DETAILS, &text, &details),
                    text,
                    details,
                    follow_on: diverged,
                });
                diverged |= state_differs;
            }
            n += 1;
        }
        match reset(&pair, &mut g, &episode) {
            Ok(true) => {}
            Ok(false) => {
                // Both servers hold the same collections that no delete removes (a view over a
                // renamed table breaks every later DROP in SQLite, on both sides alike): the
                // next episode starts on a fresh pair.
                stuck_restarts += 1;
                pair = super::start_pair().expect("the pair started once already");
            }
            Err(why) => {
                // The two sides hold different collections now: every later step would differ
                // for that alone, so the run stops here and reports what it has.
                findings.push(Finding {
                    case: n,
                    known: None,
                    text: "end of the episode: its collections deleted on both sides".into(),
                    details: vec![why],
                    follow_on: false,
                });
                break 'episodes;
            }
        }
    }
    let elapsed = started.elapsed();
    let mut header = format!(
        "differential collections: seed={seed:#x}, {n} steps in {episodes} episodes ({stuck_restarts} ended with undeletable collections on both sides, then fresh servers), {:.1}s\nreference statuses by step kind:",
        elapsed.as_secs_f64()
    );
    let mut last = String::new();
    for ((op, st), k) in &statuses {
        if *op != last {
            header.push_str(&format!("\n  {op}:"));
            last.clone_from(op);
        }
        header.push_str(&format!(" {st}×{k}"));
    }
    super::conclude(
        "collections",
        &header,
        &findings,
        subject,
        &format!("DIFF_SEED={seed:#x} DIFF_COLLECTION_CASES={n_cases}"),
    );
}

/// End an episode: delete its collections on both sides (views and referencing collections
/// first, by retrying), until both are back to the system collections and users. False when
/// both sides keep the same collections, refusing their deletes alike (the caller starts a
/// fresh pair); Err names the episode when a side keeps what the other deleted.
fn reset(pair: &Pair, g: &mut Gen, episode: &[String]) -> Result<bool, String> {
    let side = |on_ref: bool| if on_ref { "reference" } else { "subject" };
    let mut refusals: Vec<(bool, String, Value)> = Vec::new();
    for _ in 0..6 {
        refusals.clear();
        let (la, lb) = pair.su_json("GET", LIST, None);
        let left: Vec<(bool, String)> = collections(&la)
            .into_iter()
            .filter(is_episode_collection)
            .map(|c| (true, c["id"].as_str().unwrap_or("").to_owned()))
            .chain(
                collections(&lb)
                    .into_iter()
                    .filter(is_episode_collection)
                    .map(|c| (false, c["id"].as_str().unwrap_or("").to_owned())),
            )
            .collect();
        if left.is_empty() {
            g.colls.clear();
            return Ok(true);
        }
        // Views first: nothing refers to them.
        for (on_ref, id) in left {
            let s = if on_ref {
                (&pair.reference, &pair.ref_su)
            } else {
                (&pair.subject, &pair.sub_su)
            };
            let r =
                s.0.req("DELETE", &format!("/api/collections/{id}"), Some(s.1), None);
            if r.status != 204 {
                refusals.push((on_ref, id, r.json));
            }
        }
    }
    g.colls.clear();
    let (la, lb) = pair.su_json("GET", LIST, None);
    let names = |l: &Reply| -> Vec<Value> {
        collections(l)
            .into_iter()
            .filter(is_episode_collection)
            .map(|c| c["name"].clone())
            .collect()
    };
    let (rest_a, rest_b) = (names(&la), names(&lb));
    if rest_a.is_empty() && rest_b.is_empty() {
        return Ok(true);
    }
    let refused = |on_ref: bool| -> Vec<(&String, &Value)> {
        refusals
            .iter()
            .filter(|r| r.0 == on_ref)
            .map(|r| (&r.1, &r.2))
            .collect()
    };
    if rest_a == rest_b && refused(true) == refused(false) {
        return Ok(false);
    }
    let refusals: Vec<String> = refusals
        .iter()
        .map(|(on_ref, id, body)| format!("{} {id}: {body}", side(*on_ref)))
        .collect();
    Err(format!(
        "the episode's collections could not be deleted: reference keeps {rest_a:?}, subject keeps {rest_b:?}; last refusals: {refusals:?}; the episode:\n{}",
        episode.join("\n")
    ))
}
