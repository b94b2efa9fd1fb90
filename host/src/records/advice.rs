//! Index advice: record lists whose statements stepped through more table rows in full scans
//! than `[advisor].scan_threshold`, kept per query shape (collection, the filter's fields and
//! operators without their values, the sort) with their count, time, plan and the index that
//! would serve them, written as an entry for the collection's `indexes`.
//!
//! The list path pays for none of this under the threshold: it compares one counter SQLite
//! kept anyway. Only a list over it parses its shape, takes the lock and (once per shape) asks
//! the store for the plan.

use crate::query::parse::{self, Expr, Op, Operand, SortKey};
use crate::schema::Collection;
use crate::schema::index::{Index, IndexColumn};
use crate::store::records::{ScanCost, explain_list};
use crate::store::{Store, ddl};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Columns of a suggested index, at most.
const INDEX_COLUMNS_MAX: usize = 4;

/// The advice kept since start (or the last reset), bounded by `max_entries` shapes.
pub(crate) struct Advisor {
    cfg: crate::config::AdvisorConfig,
    entries: Mutex<HashMap<String, Entry>>,
}

/// What one list asks the advisor to look at: its client filter and sort, as sent, and the
/// list rule that applied to the caller (None for superusers and public lists).
#[derive(Clone, Copy)]
pub(crate) struct Watch<'a> {
    pub advisor: &'a Advisor,
    pub filter: Option<&'a str>,
    pub sort: Option<&'a str>,
    pub rule: Option<&'a str>,
}

/// One query shape's record, as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    pub collection: String,
    pub collection_id: String,
    /// The filter with its values replaced by `?` (`views > ? && title ~ ?`); "" for none.
    pub filter: String,
    /// The list rule that applied, in the same form ("" for superusers and public lists): its
    /// `=` comparisons (`owner = @request.auth.id`) count for the index like the filter's.
    pub rule: String,
    /// The sort keys (`-created,title`); "" for none.
    pub sort: String,
    pub count: u64,
    pub total_ms: f64,
    pub avg_ms: f64,
    /// Steps forward through table rows in full scans by the last list of this shape (SQLite's
    /// `FULLSCAN_STEP`: one less than the rows of each scan).
    pub rows_scanned: u64,
    /// Whether its statements sorted rows in a temporary b-tree (no index gave the order).
    pub sorted: bool,
    /// `EXPLAIN QUERY PLAN` of its page statement, taken the first time.
    pub plan: Vec<String>,
    /// The entry to add to the collection's `indexes`, when an index can serve the shape.
    pub index: Option<String>,
    /// Why there is no index to suggest, or what to know about the one suggested.
    pub note: Option<String>,
    /// The suggested index's columns, to see whether the collection has it by now.
    #[serde(skip)]
    columns: Vec<(String, bool)>,
}

impl Advisor {
    pub(crate) fn new(cfg: crate::config::AdvisorConfig) -> Self {
        Self {
            cfg,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The watch a list passes down, or None when advice is off.
    pub(crate) fn watch<'a>(
        &'a self,
        filter: Option<&'a str>,
        sort: Option<&'a str>,
        rule: Option<&'a str>,
    ) -> Option<Watch<'a>> {
        self.cfg.enabled.then_some(Watch {
            advisor: self,
            filter,
            sort,
            rule: rule.filter(|r| !r.trim().is_empty()),
        })
    }

    /// Whether a list that cost `cost` is to be recorded.
    pub(crate) fn over(&self, cost: &ScanCost) -> bool {
        cost.full_scan_rows > self.cfg.scan_threshold
    }

    /// Every shape recorded, the most total time first. A suggestion the collection has taken
    /// up since (an index of `schema`'s collection starts with its columns) is shown as done.
    pub(crate) fn entries(&self, schema: &crate::schema::Schema) -> Vec<Entry> {
        let mut all: Vec<Entry> = self
            .entries
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for e in &mut all {
            let Some(c) = schema.by_id(&e.collection_id) else {
                continue;
            };
            if e.index.is_some()
                && let Some(name) = covering(c, &e.columns)
            {
                e.index = None;
                e.note = Some(format!(
                    "Done: the collection's index {name} serves this shape now."
                ));
            }
        }
        all.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
        all
    }

    /// Forget every shape recorded.
    pub(crate) fn reset(&self) {
        if let Ok(mut m) = self.entries.lock() {
            m.clear();
        }
    }

    /// Record one list of `c` over the threshold: its statement `sel`, its cost, its time.
    /// A new shape is explained once (a read of its own) and gets its suggestion.
    pub(crate) async fn record(
        &self,
        store: &Store,
        c: &Collection,
        watch: Watch<'_>,
        sel: &crate::query::Select,
        cost: ScanCost,
        took: Duration,
    ) {
        crate::metrics::index_advice_scan(&c.name);
        let shape = Shape::of(watch.filter, watch.sort).with_rule(watch.rule);
        let key = format!("{}\n{}\n{}\n{}", c.id, shape.filter, shape.sort, shape.rule);
        let ms = took.as_secs_f64() * 1000.0;
        if self.bump(&key, cost, ms) {
            return;
        }
        let mut advice = suggest(c, &shape);
        let explained = store
            .read(|conn| {
                let plan = explain_list(conn, c, sel)?;
                // A name already taken (an index made outside `indexes`, say) would make the
                // collection update fail: the advice takes the next free one.
                if let Some(ix) = advice.index.as_mut() {
                    let base = ix.index_name.clone();
                    let mut n = 1;
                    while ddl::index_exists(conn, &ix.index_name)? {
                        n += 1;
                        ix.index_name = format!("{base}_{n}");
                    }
                }
                Ok(plan)
            })
            .await;
        let plan = explained.unwrap_or_else(|e| vec![format!("(no plan: {e})")]);
        let entry = Entry {
            collection: c.name.clone(),
            collection_id: c.id.clone(),
            filter: shape.filter,
            rule: shape.rule,
            sort: shape.sort,
            count: 1,
            total_ms: ms,
            avg_ms: ms,
            rows_scanned: cost.full_scan_rows,
            sorted: cost.sorts > 0,
            plan,
            columns: advice
                .index
                .as_ref()
                .map(|i| {
                    i.columns
                        .iter()
                        .map(|col| (col.name.clone(), !col.sort.is_empty()))
                        .collect()
                })
                .unwrap_or_default(),
            index: advice.index.map(|i| i.build()),
            note: advice.note,
        };
        self.insert(key, entry, cost, ms);
    }

    /// Count one more list of a known shape; false when the shape is new.
    fn bump(&self, key: &str, cost: ScanCost, ms: f64) -> bool {
        let Ok(mut m) = self.entries.lock() else {
            return true;
        };
        let Some(e) = m.get_mut(key) else {
            return false;
        };
        e.count += 1;
        e.total_ms += ms;
        e.avg_ms = e.total_ms / as_f64(e.count);
        e.rows_scanned = cost.full_scan_rows;
        e.sorted |= cost.sorts > 0;
        true
    }

    /// Keep a new shape's entry; past `max_entries` the shape with the least total time goes
    /// (the new one too, when it is that shape). Another list of the shape may have come first.
    fn insert(&self, key: String, entry: Entry, cost: ScanCost, ms: f64) {
        if self.bump(&key, cost, ms) {
            return;
        }
        let Ok(mut m) = self.entries.lock() else {
            return;
        };
        if m.len() >= self.cfg.max_entries.max(1) {
            let least = m
                .iter()
                .min_by(|a, b| a.1.total_ms.total_cmp(&b.1.total_ms))
                .map(|(k, e)| (k.clone(), e.total_ms));
            match least {
                Some((k, t)) if t < entry.total_ms => {
                    m.remove(&k);
                }
                _ => return,
            }
        }
        m.insert(key, entry);
    }
}

fn as_f64(n: u64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "counts stay far below 2^52; an average needs no more"
    )]
    let f = n as f64;
    f
}

/// A list's shape: its filter and sort as they read without their values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    pub filter: String,
    pub sort: String,
    pub rule: String,
    /// The parsed filter and sort (None: absent or, which cannot happen after they compiled,
    /// unparseable).
    expr: Option<Expr>,
    keys: Vec<SortKey>,
    /// The parsed list rule that applied.
    rule_expr: Option<Expr>,
}

impl Shape {
    pub(crate) fn of(filter: Option<&str>, sort: Option<&str>) -> Shape {
        let expr = filter.and_then(|f| parse::parse_filter(f).ok().flatten());
        let keys = sort
            .and_then(|s| parse::parse_sort(s).ok())
            .unwrap_or_default();
        let mut text = String::new();
        if let Some(e) = &expr {
            push_expr(&mut text, e, false);
        }
        let sort = keys
            .iter()
            .map(|k| format!("{}{}", if k.desc { "-" } else { "" }, path_text(&k.path)))
            .collect::<Vec<_>>()
            .join(",");
        Shape {
            filter: text,
            sort,
            rule: String::new(),
            expr,
            keys,
            rule_expr: None,
        }
    }

    /// The shape with the list rule that applied to the caller.
    pub(crate) fn with_rule(mut self, rule: Option<&str>) -> Shape {
        self.rule_expr = rule.and_then(|r| parse::parse_filter(r).ok().flatten());
        self.rule.clear();
        if let Some(e) = &self.rule_expr {
            push_expr(&mut self.rule, e, false);
        }
        self
    }
}

fn push_expr(out: &mut String, e: &Expr, in_and: bool) {
    match e {
        Expr::And(a, b) => {
            push_expr(out, a, true);
            out.push_str(" && ");
            push_expr(out, b, true);
        }
        Expr::Or(a, b) => {
            if in_and {
                out.push('(');
            }
            push_expr(out, a, false);
            out.push_str(" || ");
            push_expr(out, b, false);
            if in_and {
                out.push(')');
            }
        }
        Expr::Cmp { left, op, right } => {
            push_operand(out, left);
            out.push(' ');
            out.push_str(op_sign(*op));
            out.push(' ');
            push_operand(out, right);
        }
    }
}

fn push_operand(out: &mut String, o: &Operand) {
    match o {
        Operand::Ident(p) => out.push_str(&path_text(p)),
        Operand::Call { name, args } => {
            out.push_str(name);
            out.push('(');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_operand(out, a);
            }
            out.push(')');
        }
        Operand::Text(_) | Operand::Number(_) | Operand::Bool(_) | Operand::Null => out.push('?'),
    }
}

fn path_text(p: &parse::Path) -> String {
    let mut s = p.segments.join(".");
    if let Some(m) = p.modifier {
        s.push_str(match m {
            parse::Modifier::Isset => ":isset",
            parse::Modifier::Changed => ":changed",
            parse::Modifier::Length => ":length",
            parse::Modifier::Each => ":each",
            parse::Modifier::Lower => ":lower",
        });
    }
    s
}

fn op_sign(op: Op) -> &'static str {
    match op {
        Op::Eq => "=",
        Op::Neq => "!=",
        Op::Gt => ">",
        Op::Gte => ">=",
        Op::Lt => "<",
        Op::Lte => "<=",
        Op::Like => "~",
        Op::NotLike => "!~",
        Op::AnyEq => "?=",
        Op::AnyNeq => "?!=",
        Op::AnyGt => "?>",
        Op::AnyGte => "?>=",
        Op::AnyLt => "?<",
        Op::AnyLte => "?<=",
        Op::AnyLike => "?~",
        Op::AnyNotLike => "?!~",
    }
}

/// The index a shape suggests (in PocketBase's parts, so its name can still change), or why
/// there is none.
#[derive(Debug, Default)]
pub(crate) struct Suggestion {
    pub index: Option<Index>,
    pub note: Option<String>,
}

/// The index that would serve `shape` on `c`: the columns the filter's top-level `&&` compares
/// with `=` first (an index finds their rows directly), then one column compared by a range
/// (`>`, `>=`, `<`, `<=`), or else the sort's columns (the index gives the order and a page
/// stops after its rows). Only plain columns of `c` count: a path through a relation, a
/// modifier or a function is no column of this table. Nothing is suggested when an index of
/// `c` already starts with those columns, nor for `~` (a `LIKE '%...%'` no b-tree serves).
pub(crate) fn suggest(c: &Collection, shape: &Shape) -> Suggestion {
    if c.is_view() {
        return Suggestion {
            index: None,
            note: Some(
                "A view collection has no indexes of its own: an index on the tables its query \
                 reads (declared in their collections' `indexes`) is what can serve it."
                    .into(),
            ),
        };
    }
    let mut eq: Vec<String> = Vec::new();
    let mut range: Option<String> = None;
    let mut like = false;
    for e in shape.rule_expr.iter().chain(shape.expr.iter()) {
        conjuncts(e, &mut |cmp| match cmp {
            Expr::Cmp { left, op, right } => {
                let col = column(c, left, right);
                match (op, col) {
                    (Op::Eq, Some(col)) if !eq.contains(&col) => eq.push(col),
                    (Op::Gt | Op::Gte | Op::Lt | Op::Lte, Some(col)) => {
                        range.get_or_insert(col);
                    }
                    (Op::Like | Op::AnyLike, _) => like = true,
                    _ => {}
                }
            }
            Expr::And(..) | Expr::Or(..) => {}
        });
    }
    let mut cols: Vec<(String, bool)> = eq.iter().map(|c| (c.clone(), false)).collect();
    if let Some(r) = range.filter(|r| !eq.contains(r)) {
        cols.push((r, false));
    } else {
        let sort: Vec<(String, bool)> = shape
            .keys
            .iter()
            .map_while(|k| sort_column(c, k).map(|col| (col, k.desc)))
            .collect();
        // SQLite walks an index both ways: one direction for every key needs no DESC.
        let mixed = sort.iter().any(|(_, d)| *d) && sort.iter().any(|(_, d)| !*d);
        for (col, desc) in sort {
            if !cols.iter().any(|(c, _)| *c == col) {
                cols.push((col, mixed && desc));
            }
        }
    }
    cols.truncate(INDEX_COLUMNS_MAX);
    if cols.is_empty() {
        let note = if like {
            "A `~` filter is a LIKE '%...%' match, which no b-tree index serves; \
             nothing else in the filter or sort names a column of the collection."
        } else {
            "Neither the filter nor the sort compares a column of the collection in a way an \
             index serves (`||`, relations and functions are not looked into)."
        };
        return Suggestion {
            index: None,
            note: Some(note.into()),
        };
    }
    if cols.len() == 1 && cols[0].0 == "id" {
        return Suggestion {
            index: None,
            note: Some("`id` is the primary key: it is indexed already.".into()),
        };
    }
    if let Some(existing) = covering(c, &cols) {
        return Suggestion {
            index: None,
            note: Some(format!(
                "The collection's index {existing} starts with these columns already."
            )),
        };
    }
    let name = format!(
        "idx_{}_{}",
        c.name,
        cols.iter()
            .map(|(c, _)| c.as_str())
            .collect::<Vec<_>>()
            .join("_")
    );
    let index = Index {
        index_name: name,
        table_name: c.name.clone(),
        columns: cols
            .into_iter()
            .map(|(name, desc)| IndexColumn {
                name,
                collate: String::new(),
                sort: if desc { "DESC".into() } else { String::new() },
            })
            .collect(),
        ..Index::default()
    };
    let note = like.then(|| {
        "The `~` part of the filter (LIKE '%...%') is checked on the rows the index finds; no \
         index serves it."
            .to_owned()
    });
    Suggestion {
        index: Some(index),
        note,
    }
}

/// Each comparison of the filter's top-level `&&` chain (an `||` is one opaque conjunct).
fn conjuncts(e: &Expr, f: &mut impl FnMut(&Expr)) {
    match e {
        Expr::And(a, b) => {
            conjuncts(a, f);
            conjuncts(b, f);
        }
        other => f(other),
    }
}

/// The column of `c` a comparison puts against a value (a literal or `@request.*`), either way
/// round.
fn column(c: &Collection, left: &Operand, right: &Operand) -> Option<String> {
    let plain = |o: &Operand| match o {
        Operand::Ident(p) => p.segments.first().is_some_and(|s| s.starts_with('@')),
        Operand::Text(_) | Operand::Number(_) | Operand::Bool(_) | Operand::Null => true,
        Operand::Call { .. } => false,
    };
    let col = |o: &Operand| match o {
        Operand::Ident(p) if p.segments.len() == 1 && p.modifier.is_none() => c
            .field(&p.segments[0])
            .filter(|f| !f.is_multi())
            .map(|f| f.name.clone()),
        _ => None,
    };
    match (col(left), col(right)) {
        (Some(name), None) if plain(right) => Some(name),
        (None, Some(name)) if plain(left) => Some(name),
        _ => None,
    }
}

fn sort_column(c: &Collection, k: &SortKey) -> Option<String> {
    let p = &k.path;
    if p.segments.len() != 1 || p.modifier.is_some() {
        return None;
    }
    c.field(&p.segments[0]).map(|f| f.name.clone())
}

/// The name of an index `c` declares whose leading columns are `cols` (compared without case,
/// direction aside).
fn covering(c: &Collection, cols: &[(String, bool)]) -> Option<String> {
    c.indexes.iter().find_map(|raw| {
        let ix = Index::parse(raw);
        let have: Vec<String> = ix
            .columns
            .iter()
            .map(|col| col.name.trim_matches(['`', '"', '[', ']']).to_lowercase())
            .collect();
        let starts = ix.where_clause.is_empty()
            && have.len() >= cols.len()
            && cols
                .iter()
                .zip(&have)
                .all(|((want, _), got)| want.to_lowercase() == *got);
        starts.then_some(ix.index_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn posts(indexes: &[&str]) -> Collection {
        let def = json!({
            "name": "posts",
            "type": "base",
            "fields": [
                {"name": "title", "type": "text"},
                {"name": "views", "type": "number"},
                {"name": "status", "type": "text"},
                {"name": "tags", "type": "select", "maxSelect": 2, "values": ["a", "b"]},
                {"name": "created", "type": "autodate", "onCreate": true},
            ],
            "indexes": indexes,
        });
        crate::schema::define::build(&def, None, &crate::schema::Schema::default())
            .expect("a valid fixture")
    }

    /// The shape's filter and sort texts, and the suggested entry or the note.
    fn check(filter: &str, sort: &str, indexes: &[&str]) -> (String, String, String) {
        let c = posts(indexes);
        let f = (!filter.is_empty()).then_some(filter);
        let s = (!sort.is_empty()).then_some(sort);
        let shape = Shape::of(f, s);
        let sug = suggest(&c, &shape);
        let out = match sug.index {
            Some(ix) => ix.build(),
            None => format!("none: {}", sug.note.unwrap_or_default()),
        };
        (shape.filter, shape.sort, out)
    }

    #[test]
    fn shape_strips_values_and_keeps_paths_and_operators() {
        let (f, s, _) = check(
            "views > 500 && (title ~ 'x' || status = \"draft\") && author.name:lower = @request.auth.name",
            "-created, +title",
            &[],
        );
        assert_eq!(
            f,
            "views > ? && (title ~ ? || status = ?) && author.name:lower = @request.auth.name"
        );
        assert_eq!(s, "-created,title");
        // Two filters that differ only in their values are one shape.
        assert_eq!(
            Shape::of(Some("views>1 && title~'a'"), None).filter,
            Shape::of(Some("views > 99 && title ~ \"b\""), None).filter
        );
    }

    #[test]
    fn the_list_rule_s_equalities_lead_the_index() {
        let c = posts(&[]);
        let shape = Shape::of(None, Some("-created"))
            .with_rule(Some("status = @request.auth.id && title ~ 'x'"));
        assert_eq!(shape.rule, "status = @request.auth.id && title ~ ?");
        let ix = suggest(&c, &shape).index.expect("an index").build();
        assert_eq!(
            ix,
            "CREATE INDEX `idx_posts_status_created` ON `posts` (\n  `status`,\n  `created`\n)"
        );
        // A rule alone, no filter or sort, still finds its column.
        let alone = Shape::of(None, None).with_rule(Some("status = @request.auth.id"));
        let ix = suggest(&c, &alone).index.expect("an index").build();
        assert_eq!(ix, "CREATE INDEX `idx_posts_status` ON `posts` (`status`)");
        // No rule (a superuser's list): only what the client sent.
        assert_eq!(Shape::of(None, None).with_rule(None).rule, "");
    }

    #[test]
    fn sort_alone_suggests_the_sort_column() {
        let (_, _, ix) = check("", "-created", &[]);
        assert_eq!(
            ix,
            "CREATE INDEX `idx_posts_created` ON `posts` (`created`)"
        );
    }

    #[test]
    fn range_wins_over_sort_and_like_is_left_to_the_rows() {
        let (_, _, ix) = check("views>500 && title~'lorem'", "-views", &[]);
        assert_eq!(ix, "CREATE INDEX `idx_posts_views` ON `posts` (`views`)");
    }

    #[test]
    fn equality_first_then_sort() {
        let (_, _, ix) = check("status='draft'", "-created,title", &[]);
        assert_eq!(
            ix,
            "CREATE INDEX `idx_posts_status_created_title` ON `posts` (\n  `status`,\n  `created` DESC,\n  `title`\n)"
        );
        let (_, _, ix) = check("status='draft' && views >= 3", "-created", &[]);
        assert_eq!(
            ix,
            "CREATE INDEX `idx_posts_status_views` ON `posts` (\n  `status`,\n  `views`\n)"
        );
    }

    #[test]
    fn like_only_is_not_served() {
        let (_, _, ix) = check("title ~ 'lorem'", "", &[]);
        assert!(ix.starts_with("none: A `~` filter"), "{ix}");
    }

    #[test]
    fn relations_multi_values_and_or_are_not_columns() {
        for f in [
            "author.title = 'x'",
            "tags ?= 'a'",
            "tags = 'a'",
            "views > 1 || status = 'x'",
        ] {
            let (_, _, ix) = check(f, "", &[]);
            assert!(ix.starts_with("none:"), "{f}: {ix}");
        }
    }

    #[test]
    fn an_index_the_collection_has_is_not_suggested_again() {
        let (_, _, ix) = check(
            "",
            "-created",
            &["CREATE INDEX idx_abc ON posts (created, title)"],
        );
        assert!(ix.contains("idx_abc"), "{ix}");
        let (_, _, ix) = check("", "created", &["CREATE INDEX idx_abc ON posts (title)"]);
        assert_eq!(
            ix,
            "CREATE INDEX `idx_posts_created` ON `posts` (`created`)"
        );
        let (_, _, ix) = check("id = 'x'", "", &[]);
        assert!(ix.contains("primary key"), "{ix}");
    }
}
