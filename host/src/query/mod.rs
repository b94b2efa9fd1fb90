//! PocketBase's filter / sort language -> SQLite SQL with bound parameters. Pure: no IO, no async.
//!
//! Identifiers in the SQL come only from the schema; every user value is a bound, numbered
//! parameter (`?N`), so a fragment may be repeated (the multi-value "all" checks repeat the other
//! operand) without re-binding. One [`Query`] compiles a rule, a filter and a sort into one
//! statement: they share the joins (a relation path used twice is joined once, as in PocketBase)
//! and the parameter list.
//!
//! Semantics follow PocketBase 0.40.6 (see ARCHITECTURE.md, "The query language"):
//! * a path through a multi-value (multi relation, back-relation, `@collection`, `:each`) joins
//!   the rows; `?op` is "any joined value", a plain `op` is "every joined value", checked with a
//!   correlated `NOT EXISTS` over the same path;
//! * `=`/`!=` treat `""` and `NULL` alike, and `!=` is `IS NOT` so NULL counts as different;
//! * a non-superuser's filter that joins another collection only sees the joined rows that
//!   collection's listRule admits (a `null` listRule refuses the filter);
//! * hidden fields, and auth emails not marked visible, are out of reach of non-superuser filters.

pub(crate) mod parse;

use crate::schema::value::Stored;
use crate::schema::{Collection, FieldType, Schema};
use parse::{Expr, Modifier, Op, Operand, Path};
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum QueryError {
    #[error("parse: {0}")]
    Parse(String),
    #[error("invalid left or right operand: {0}")]
    Resolve(String),
    /// Client filters and sorts may not use `@request.` / `@collection.` (PocketBase: 403).
    #[error("Only superusers can filter by {0}")]
    Forbidden(&'static str),
}

impl From<parse::ParseError> for QueryError {
    fn from(e: parse::ParseError) -> Self {
        Self::Parse(e.0)
    }
}

fn resolve_err<T>(msg: impl Into<String>) -> Result<T, QueryError> {
    Err(QueryError::Resolve(msg.into()))
}

/// A compiled statement fragment. The store splices these into its statement; `?N` placeholders
/// index `params` (1-based), so any plain `?` the store appends after them numbers on from there.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Select {
    /// ` LEFT JOIN ...` clauses (empty when the query needs none; then no DISTINCT is needed).
    pub joins: String,
    pub where_sql: String,
    pub order_sql: String,
    pub params: Vec<Stored>,
    /// Every table the statement reads (the base collection's included): what a cached result
    /// depends on.
    pub tables: Vec<String>,
    /// The result depends on more than the data, the query and the caller (`@request.headers`,
    /// the clock): never cache it.
    pub volatile: bool,
}

/// What `@request.*` resolves to.
#[derive(Debug, Default, Clone)]
pub(crate) struct RequestInfo {
    /// The caller's record as the rules see it (every field, hidden ones included) plus
    /// `collectionId` and `collectionName`; None for guests.
    pub auth: Option<Map<String, Value>>,
    pub is_superuser: bool,
    pub body: Map<String, Value>,
    pub query: Map<String, Value>,
    pub headers: Map<String, Value>,
    pub method: String,
    pub context: String,
}

pub(crate) fn qi(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `table.column` (or, for a multi-value column, one of its items) among `n` bound keys: how
/// expand finds the related records of a whole page in one statement.
pub(crate) fn keys_condition(table: &str, column: &str, multi: bool, n: usize) -> String {
    let marks = vec!["?"; n].join(", ");
    let col = format!("{}.{}", qi(table), qi(column));
    if multi {
        format!(
            "EXISTS (SELECT 1 FROM json_each(CASE WHEN iif(json_valid({col}), json_type({col})='array', FALSE) THEN {col} ELSE json_array({col}) END) `__expand_je` WHERE `__expand_je`.`value` IN ({marks}))"
        )
    } else {
        format!("{col} IN ({marks})")
    }
}

/// Relation hops allowed in one path (PocketBase's limit).
const MAX_RELATION_DEPTH: usize = 6;
/// Nesting of "joined collection's listRule" compilation (a rule that joins a collection whose
/// rule joins another ...); deeper chains are refused rather than followed forever.
const MAX_RULE_NESTING: usize = 4;

// ---------------------------------------------------------------------------------------------
// SQL helpers shared with PocketBase's storage conventions
// ---------------------------------------------------------------------------------------------

/// Read a json column (or any column) as a JSON value; `path` is `""` or `.a[0].b` / `[1]`.
fn json_extract(col: &str, path: &str) -> String {
    format!(
        "(CASE WHEN json_valid({col}) THEN JSON_EXTRACT({col}, '${path}') ELSE JSON_EXTRACT(json_object('pb', {col}), '$.pb{path}') END)"
    )
}

/// The items of a (possibly single-valued) multi field as json_each rows.
fn json_each(col: &str) -> String {
    format!(
        "json_each(CASE WHEN iif(json_valid({col}), json_type({col})='array', FALSE) THEN {col} ELSE json_array({col}) END)"
    )
}

fn json_array_length(col: &str) -> String {
    format!(
        "json_array_length(CASE WHEN iif(json_valid({col}), json_type({col})='array', FALSE) THEN {col} ELSE (CASE WHEN {col} = '' OR {col} IS NULL THEN json_array() ELSE json_array({col}) END) END)"
    )
}

/// `<collection>_via_<field>` seen from `coll`: the records of `source` whose relation `field`
/// points at `coll`.
pub(crate) struct BackRelation {
    pub source: Arc<Collection>,
    /// The relation field's index in `source.fields`.
    pub field: usize,
    /// The relation field holds several ids.
    pub multi: bool,
    /// The relation field has a single-column UNIQUE index (at most one record points here).
    pub unique: bool,
}

/// Resolve a back-relation name, or say why it is not one.
pub(crate) fn back_relation(
    schema: &Schema,
    coll: &Collection,
    prop: &str,
) -> Result<BackRelation, String> {
    let (coll_key, field_name) = prop
        .split_once("_via_")
        .ok_or_else(|| format!("unknown field {prop:?}"))?;
    let source = schema
        .by_id_or_name(coll_key)
        .cloned()
        .ok_or_else(|| format!("failed to load the back-relation collection {coll_key:?}"))?;
    let field = source
        .fields
        .iter()
        .position(|f| f.name == field_name)
        .ok_or_else(|| format!("missing back-relation field {field_name:?}"))?;
    let f = &source.fields[field];
    if f.kind != FieldType::Relation {
        return Err(format!("invalid back-relation field {field_name:?}"));
    }
    let points_to = f.opt_str("collectionId");
    if points_to != coll.id && points_to != coll.name {
        return Err(format!(
            "invalid collection reference of a back-relation field {field_name:?}"
        ));
    }
    let multi = f.is_multi();
    let unique = has_single_column_unique_index(&source.indexes, field_name);
    Ok(BackRelation {
        source,
        field,
        multi,
        unique,
    })
}

/// Does `indexes` hold a UNIQUE index on exactly `column`?
fn has_single_column_unique_index(indexes: &[String], column: &str) -> bool {
    indexes.iter().any(|ix| {
        let upper = ix.to_ascii_uppercase();
        if !upper.trim_start().starts_with("CREATE UNIQUE INDEX") {
            return false;
        }
        let (Some(open), Some(close)) = (ix.rfind('('), ix.rfind(')')) else {
            return false;
        };
        if close < open {
            return false;
        }
        let cols: Vec<&str> = ix[open + 1..close].split(',').collect();
        if cols.len() != 1 {
            return false;
        }
        let col = cols[0].split_whitespace().next().unwrap_or("");
        col.trim_matches(|c| matches!(c, '`' | '"' | '[' | ']' | '\'')) == column
    })
}

/// Go's `%v` of a float64 as PocketBase writes numbers into LIKE patterns.
fn number_text(n: f64) -> String {
    crate::schema::value::number(n).to_string()
}

/// PocketBase's LIKE pattern rule: a value with an unescaped `%` is used verbatim; otherwise its
/// unescaped `\`, `%` and `_` are escaped and it is wrapped in `%...%` ("contains").
fn like_pattern(t: &str) -> String {
    if contains_unescaped(t, '%') {
        return t.to_owned();
    }
    format!("%{}%", escape_unescaped(t, &['\\', '%', '_']))
}

fn contains_unescaped(s: &str, ch: char) -> bool {
    let mut prev: Option<char> = None;
    for c in s.chars() {
        if c == ch && prev != Some('\\') {
            return true;
        }
        // A doubled backslash is a complete escape sequence: it escapes nothing after it.
        prev = if c == '\\' && prev == Some('\\') {
            None
        } else {
            Some(c)
        };
    }
    false
}

/// Prefix each of `specials` with a backslash unless one already precedes it.
fn escape_unescaped(s: &str, specials: &[char]) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(chars.len() + 4);
    let mut pending = false;
    for i in (0..chars.len()).rev() {
        if pending {
            if chars[i] != '\\' {
                out.push('\\');
            }
            pending = false;
        } else {
            pending = specials.contains(&chars[i]);
        }
        out.push(chars[i]);
        if i == 0 && pending {
            out.push('\\');
        }
    }
    out.into_iter().rev().collect()
}

// ---------------------------------------------------------------------------------------------
// Resolved operands
// ---------------------------------------------------------------------------------------------

/// How an operand looks to PocketBase's empty / non-empty checks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A column or an expression over columns.
    Expr,
    /// The SQL `NULL` identifier.
    Null,
    /// A constant known to be non-empty (`1`, `0`, `TRUE`, `FALSE`).
    Const,
}

#[derive(Debug, Clone)]
struct Res {
    sql: String,
    kind: Kind,
    /// Indices (0-based) of the parameters this operand bound, in order.
    params: Vec<usize>,
    /// Compared with `IS`/`IS NOT` and without COALESCE (json values).
    no_coalesce: bool,
    /// The "every joined value" subquery when the path crosses a multi-value join.
    multi: Option<Box<MultiMatch>>,
    /// An extra condition AND-ed to every comparison using this operand.
    after: Option<String>,
    /// LIKE patterns already applied to this operand's parameters.
    like_wrapped: bool,
}

impl Res {
    fn expr(sql: String) -> Res {
        Res {
            sql,
            kind: Kind::Expr,
            params: Vec::new(),
            no_coalesce: false,
            multi: None,
            after: None,
            like_wrapped: false,
        }
    }
    fn ident(sql: &str, kind: Kind) -> Res {
        Res {
            kind,
            ..Res::expr(sql.to_owned())
        }
    }
}

#[derive(Debug, Clone)]
struct Join {
    /// A quoted table name or a table-valued function call.
    table: String,
    alias: String,
    on: Option<String>,
}

impl Join {
    fn sql(&self) -> String {
        match &self.on {
            Some(on) => format!(" LEFT JOIN {} {} ON {on}", self.table, qi(&self.alias)),
            None => format!(" LEFT JOIN {} {}", self.table, qi(&self.alias)),
        }
    }
}

/// `SELECT <value> FROM <base> __mm_<base> <joins> WHERE __mm_<base>.id = <base>.id`: every
/// value a multi-value path yields for the current row.
#[derive(Debug, Clone)]
struct MultiMatch {
    from_table: String,
    from_alias: String,
    base_alias: String,
    joins: Vec<Join>,
    value: String,
}

impl MultiMatch {
    fn sql(&self) -> String {
        let joins: String = self.joins.iter().map(Join::sql).collect();
        format!(
            "SELECT {} AS `multiMatchValue` FROM {} {}{joins} WHERE {}.`id` = {}.`id`",
            self.value,
            self.from_table,
            qi(&self.from_alias),
            qi(&self.from_alias),
            qi(&self.base_alias)
        )
    }
}

/// Where an expression is being compiled: the collection its bare field names refer to, the
/// alias of that collection's table in the statement, and whether hidden fields are reachable.
#[derive(Clone)]
struct Scope {
    coll: Arc<Collection>,
    alias: String,
    /// Rules and superusers see hidden fields; other callers' filters do not (and their joins
    /// are limited by the joined collections' listRules).
    allow_hidden: bool,
    nesting: usize,
}

/// The state of one path walk (PocketBase's "runner").
struct Walk {
    coll: Arc<Collection>,
    alias: String,
    allow_hidden: bool,
    /// `@request.*` paths answer NULL for fields that do not exist.
    nullify_missing: bool,
    mm: MultiMatch,
    mm_alias: String,
    with_mm: bool,
    hops: usize,
}

// ---------------------------------------------------------------------------------------------
// The compiler
// ---------------------------------------------------------------------------------------------

/// Compiles rules, filters and a sort for one collection into one [`Select`].
pub(crate) struct Query<'a> {
    schema: &'a Schema,
    base: Arc<Collection>,
    req: &'a RequestInfo,
    params: Vec<Stored>,
    joins: Vec<Join>,
    wheres: Vec<String>,
    /// Conditions from joined collections' listRules, AND-ed after every filter.
    /// (joined alias, condition): one per alias, however often the path is used.
    join_rules: Vec<(String, String)>,
    orders: Vec<String>,
    sub_alias: usize,
    tables: Vec<String>,
    volatile: bool,
}

impl<'a> Query<'a> {
    pub(crate) fn new(schema: &'a Schema, base: &Collection, req: &'a RequestInfo) -> Self {
        let base = schema
            .by_id(&base.id)
            .filter(|c| c.name == base.name)
            .cloned()
            .unwrap_or_else(|| Arc::new(base.clone()));
        Query {
            schema,
            req,
            params: Vec::new(),
            joins: Vec::new(),
            wheres: Vec::new(),
            join_rules: Vec::new(),
            orders: Vec::new(),
            sub_alias: 0,
            tables: vec![base.name.clone()],
            volatile: false,
            base,
        }
    }

    fn scope(&self, allow_hidden: bool) -> Scope {
        Scope {
            coll: Arc::clone(&self.base),
            alias: self.base.name.clone(),
            allow_hidden,
            nesting: 0,
        }
    }

    /// AND an API rule (a system expression: hidden fields and `@request.*` allowed).
    pub(crate) fn rule(&mut self, text: &str) -> Result<(), QueryError> {
        let Some(expr) = parse::parse_filter(text)? else {
            return Ok(());
        };
        let scope = self.scope(true);
        let sql = self.expr(&scope, &expr)?;
        self.wheres.push(sql);
        Ok(())
    }

    /// AND a client `filter`. Non-superusers may not use `@request.`/`@collection.` (403) nor
    /// reach hidden fields, and their joins obey the joined collections' listRules.
    pub(crate) fn filter(&mut self, text: &str) -> Result<(), QueryError> {
        if !self.req.is_superuser {
            forbid_request_refs(text)?;
        }
        let Some(expr) = parse::parse_filter(text)? else {
            return Ok(());
        };
        let scope = self.scope(self.req.is_superuser);
        let sql = self.expr(&scope, &expr)?;
        self.wheres.push(sql);
        Ok(())
    }

    /// Append a client `sort` (`-a,+b,@random,@rowid`, relation paths included).
    pub(crate) fn sort(&mut self, text: &str) -> Result<(), QueryError> {
        if !self.req.is_superuser {
            forbid_request_refs(text)?;
        }
        let scope = self.scope(self.req.is_superuser);
        for k in parse::parse_sort(text)? {
            let dir = if k.desc { "DESC" } else { "ASC" };
            let first = k.path.segments.first().map(String::as_str).unwrap_or("");
            if k.path.segments.len() == 1 && k.path.modifier.is_none() {
                if first == "@random" {
                    self.orders.push("RANDOM()".into());
                    continue;
                }
                if first == "@rowid" {
                    self.orders
                        .push(format!("{}.`_rowid_` {dir}", qi(&self.base.name)));
                    continue;
                }
            }
            let r = self.resolve_path(&scope, &k.path)?;
            if r.kind != Kind::Expr || !r.params.is_empty() {
                return resolve_err(format!("cannot sort by {first:?}"));
            }
            self.orders.push(format!("{} {dir}", r.sql));
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Select {
        let mut conds = self.wheres;
        conds.extend(self.join_rules.into_iter().map(|(_, c)| c));
        let where_sql = match conds.len() {
            0 => String::new(),
            1 => conds.pop().unwrap_or_default(),
            _ => conds
                .iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" AND "),
        };
        let joins: String = self.joins.iter().map(Join::sql).collect();
        let order_sql = self.orders.join(", ");
        // Some bound values end up unused (an empty literal compared with `=` becomes `''`):
        // number the used ones 1..n in the order the statement reads them.
        let mut map: Vec<Option<usize>> = vec![None; self.params.len()];
        let mut params = Vec::new();
        let mut renumber = |sql: &str| -> String {
            let mut out = String::with_capacity(sql.len());
            let mut rest = sql;
            while let Some(pos) = rest.find('?') {
                out.push_str(&rest[..pos]);
                let tail = &rest[pos + 1..];
                let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
                match tail[..digits].parse::<usize>() {
                    Ok(n) if n >= 1 && n <= map.len() => {
                        let slot = *map[n - 1].get_or_insert_with(|| {
                            params.push(self.params[n - 1].clone());
                            params.len()
                        });
                        out.push_str(&format!("?{slot}"));
                    }
                    _ => out.push_str(&rest[pos..pos + 1 + digits]),
                }
                rest = &tail[digits..];
            }
            out.push_str(rest);
            out
        };
        let joins = renumber(&joins);
        let where_sql = renumber(&where_sql);
        let order_sql = renumber(&order_sql);
        Select {
            joins,
            where_sql,
            order_sql,
            params,
            tables: self.tables,
            volatile: self.volatile,
        }
    }

    // --- parameters and joins ---------------------------------------------------------------

    fn bind(&mut self, v: Stored) -> (String, usize) {
        self.params.push(v);
        (format!("?{}", self.params.len()), self.params.len() - 1)
    }

    fn param(&mut self, v: Stored) -> Res {
        let (sql, i) = self.bind(v);
        Res {
            params: vec![i],
            ..Res::expr(sql)
        }
    }

    fn param_is_empty(&self, i: usize) -> bool {
        matches!(&self.params[i], Stored::Null)
            || matches!(&self.params[i], Stored::Text(t) if t.is_empty())
    }

    /// Register a join; a join with the same alias replaces the earlier one (PocketBase shares
    /// one joined row between all uses of the same path).
    fn register_join(&mut self, j: Join) -> Result<(), QueryError> {
        // Aliases come from the path as typed and SQLite compares them case-insensitively:
        // `notes_via_item` and `Notes_via_item` would be two joins with one name. PocketBase
        // answers 400 there; so do we, before any SQL exists.
        if self
            .joins
            .iter()
            .any(|x| x.alias != j.alias && x.alias.eq_ignore_ascii_case(&j.alias))
        {
            return resolve_err(format!("ambiguous join alias {:?}", j.alias));
        }
        if let Some(name) = j.table.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
            let name = name.replace("``", "`");
            if !self.tables.contains(&name) {
                self.tables.push(name);
            }
        }
        match self.joins.iter_mut().find(|x| x.alias == j.alias) {
            Some(x) => *x = j,
            None => self.joins.push(j),
        }
        Ok(())
    }

    fn next_sub_alias(&mut self, prefix: &str) -> String {
        self.sub_alias += 1;
        format!("{prefix}{}", self.sub_alias)
    }

    // --- expressions ------------------------------------------------------------------------

    fn expr(&mut self, scope: &Scope, e: &Expr) -> Result<String, QueryError> {
        Ok(match e {
            Expr::And(a, b) => format!("({} AND {})", self.expr(scope, a)?, self.expr(scope, b)?),
            Expr::Or(a, b) => format!("({} OR {})", self.expr(scope, a)?, self.expr(scope, b)?),
            Expr::Cmp { left, op, right } => {
                let l = self.operand(scope, left)?;
                let mut r = self.operand(scope, right)?;
                self.build(&l, *op, &mut r)
            }
        })
    }

    fn operand(&mut self, scope: &Scope, o: &Operand) -> Result<Res, QueryError> {
        Ok(match o {
            Operand::Text(t) => self.param(Stored::Text(t.clone())),
            Operand::Number(n) => self.param(Stored::Real(*n)),
            Operand::Bool(b) => Res::ident(if *b { "1" } else { "0" }, Kind::Const),
            Operand::Null => Res::ident("NULL", Kind::Null),
            Operand::Ident(p) => self.resolve_path(scope, p)?,
            Operand::Call { name, args } => self.call(scope, name, args)?,
        })
    }

    fn is_empty(&self, r: &Res) -> bool {
        r.kind == Kind::Null || (r.params.len() == 1 && self.param_is_empty(r.params[0]))
    }

    fn known_non_empty(&self, r: &Res) -> bool {
        r.kind == Kind::Const
            || (!r.params.is_empty()
                && r.kind != Kind::Null
                && !r.params.iter().any(|&i| self.param_is_empty(i)))
    }

    /// `=` / `!=` with PocketBase's treatment of empty values.
    fn equal(&self, eq: bool, l: &Res, r: &Res) -> String {
        let (op, null_op, concat, null_expr) = if eq {
            ("=", "IS", "OR", "IS NULL")
        } else {
            ("IS NOT", "IS NOT", "AND", "IS NOT NULL")
        };
        if l.no_coalesce || r.no_coalesce {
            return format!("{} {null_op} {}", l.sql, r.sql);
        }
        let (le, re) = (self.is_empty(l), self.is_empty(r));
        if le && re {
            return format!("'' {op} ''");
        }
        if self.known_non_empty(l) || self.known_non_empty(r) {
            let a = if le { "''" } else { l.sql.as_str() };
            let b = if re { "''" } else { r.sql.as_str() };
            return format!("{a} {op} {b}");
        }
        if le {
            return format!("('' {op} {0} {concat} {0} {null_expr})", r.sql);
        }
        if re {
            return format!("({0} {op} '' {concat} {0} {null_expr})", l.sql);
        }
        format!("COALESCE({}, '') {op} COALESCE({}, '')", l.sql, r.sql)
    }

    fn base_cmp(&mut self, l: &Res, op: Op, r: &mut Res) -> String {
        match op {
            Op::Eq | Op::AnyEq => self.equal(true, l, r),
            Op::Neq | Op::AnyNeq => self.equal(false, l, r),
            Op::Like | Op::AnyLike | Op::NotLike | Op::AnyNotLike => {
                let not = if matches!(op, Op::NotLike | Op::AnyNotLike) {
                    "NOT "
                } else {
                    ""
                };
                if r.params.is_empty() {
                    format!("{} {not}LIKE ('%' || {} || '%') ESCAPE '\\'", l.sql, r.sql)
                } else {
                    if !r.like_wrapped {
                        for &i in &r.params {
                            let text = match &self.params[i] {
                                Stored::Text(t) => t.clone(),
                                Stored::Int(n) => n.to_string(),
                                Stored::Real(f) => number_text(*f),
                                Stored::Null => String::new(),
                            };
                            self.params[i] = Stored::Text(like_pattern(&text));
                        }
                        r.like_wrapped = true;
                    }
                    format!("{} {not}LIKE {} ESCAPE '\\'", l.sql, r.sql)
                }
            }
            Op::Gt | Op::AnyGt => format!("{} > {}", l.sql, r.sql),
            Op::Gte | Op::AnyGte => format!("{} >= {}", l.sql, r.sql),
            Op::Lt | Op::AnyLt => format!("{} < {}", l.sql, r.sql),
            Op::Lte | Op::AnyLte => format!("{} <= {}", l.sql, r.sql),
        }
    }

    /// One comparison, with the "every value" subquery for plain operators over multi-values.
    fn build(&mut self, l: &Res, op: Op, r: &mut Res) -> String {
        let mut expr = self.base_cmp(l, op, r);
        let any = matches!(
            op,
            Op::AnyEq
                | Op::AnyNeq
                | Op::AnyGt
                | Op::AnyGte
                | Op::AnyLt
                | Op::AnyLte
                | Op::AnyLike
                | Op::AnyNotLike
        );
        if !any {
            let all = match (&l.multi, &r.multi) {
                (Some(lm), Some(rm)) => {
                    Some(self.many_vs_many(lm, l.no_coalesce, rm, r.no_coalesce, op))
                }
                (Some(lm), None) => Some(self.many_vs_one(lm, l.no_coalesce, op, r, false)),
                (None, Some(rm)) => Some(self.many_vs_one(rm, r.no_coalesce, op, l, true)),
                (None, None) => None,
            };
            if let Some(all) = all {
                expr = format!("(({expr}) AND ({all}))");
            }
        }
        for after in [&l.after, &r.after].into_iter().flatten() {
            expr = format!("(({expr}) AND ({after}))");
        }
        expr
    }

    fn many_vs_one(
        &mut self,
        mm: &MultiMatch,
        no_coalesce: bool,
        op: Op,
        other: &Res,
        inverse: bool,
    ) -> String {
        let alias = self.next_sub_alias("__sm");
        let mut value = Res {
            no_coalesce,
            ..Res::expr(format!("{}.`multiMatchValue`", qi(&alias)))
        };
        let mut other = Res {
            multi: None,
            after: None,
            no_coalesce: false,
            ..other.clone()
        };
        let cond = if inverse {
            self.base_cmp(&other, op, &mut value)
        } else {
            self.base_cmp(&value, op, &mut other)
        };
        format!(
            "NOT EXISTS (SELECT 1 FROM ({}) {} WHERE NOT ({cond}))",
            mm.sql(),
            qi(&alias)
        )
    }

    fn many_vs_many(
        &mut self,
        lm: &MultiMatch,
        lnc: bool,
        rm: &MultiMatch,
        rnc: bool,
        op: Op,
    ) -> String {
        let la = self.next_sub_alias("__ml");
        let ra = self.next_sub_alias("__mr");
        let l = Res {
            no_coalesce: lnc,
            ..Res::expr(format!("{}.`multiMatchValue`", qi(&la)))
        };
        let mut r = Res {
            no_coalesce: rnc,
            ..Res::expr(format!("{}.`multiMatchValue`", qi(&ra)))
        };
        let cond = self.base_cmp(&l, op, &mut r);
        format!(
            "NOT EXISTS (SELECT 1 FROM ({}) {} LEFT JOIN ({}) {} WHERE NOT ({cond}))",
            lm.sql(),
            qi(&la),
            rm.sql(),
            qi(&ra)
        )
    }

    // --- functions --------------------------------------------------------------------------

    fn call(&mut self, scope: &Scope, name: &str, args: &[Operand]) -> Result<Res, QueryError> {
        let render: fn(&[&str]) -> String = match name {
            "geoDistance" => {
                if args.len() != 4 {
                    return resolve_err("geoDistance expects 4 arguments");
                }
                |a: &[&str]| {
                    let (lon_a, lat_a, lon_b, lat_b) = (a[0], a[1], a[2], a[3]);
                    format!(
                        "(6371 * acos(min(1, max(-1, cos(radians({lat_a})) * cos(radians({lat_b})) * cos(radians({lon_b}) - radians({lon_a})) + sin(radians({lat_a})) * sin(radians({lat_b}))))))"
                    )
                }
            }
            "strftime" => {
                if args.is_empty() || args.len() > 10 {
                    return resolve_err("strftime expects 1 to 10 arguments");
                }
                if !matches!(args[0], Operand::Text(_)) {
                    return resolve_err("strftime's format must be a text literal");
                }
                |a: &[&str]| format!("strftime({})", a.join(","))
            }
            _ => return resolve_err(format!("unknown function {name:?}")),
        };
        let mut resolved = Vec::with_capacity(args.len());
        for a in args {
            resolved.push(self.operand(scope, a)?);
        }
        let sql: Vec<&str> = resolved.iter().map(|r| r.sql.as_str()).collect();
        let mut res = Res::expr(render(&sql));
        // The result carries its arguments' parameters, as PocketBase's does (they decide the
        // empty / non-empty checks and get LIKE-wrapped on the right of `~`), except strftime's
        // format, which PocketBase writes into the SQL itself (here it stays bound).
        let skip = usize::from(name == "strftime");
        res.params = resolved
            .iter()
            .skip(skip)
            .flat_map(|r| r.params.iter().copied())
            .collect();
        // An argument over a multi-value path makes the result multi-valued too.
        // (Other arguments keep their outer-query SQL, which the correlated subquery can see.)
        if let Some(k) = resolved.iter().position(|r| r.multi.is_some())
            && let Some(mm) = resolved[k].multi.as_deref()
        {
            let values: Vec<&str> = resolved
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    if i == k {
                        mm.value.as_str()
                    } else {
                        r.sql.as_str()
                    }
                })
                .collect();
            let mut mm = mm.clone();
            mm.value = render(&values);
            res.multi = Some(Box::new(mm));
        }
        Ok(res)
    }

    // --- identifiers ------------------------------------------------------------------------

    fn resolve_path(&mut self, scope: &Scope, p: &Path) -> Result<Res, QueryError> {
        let first = p.segments.first().map(String::as_str).unwrap_or("");
        if first.starts_with('@')
            && p.segments.len() == 1
            && p.modifier.is_none()
            && let Some(v) = macro_value(first)
        {
            self.volatile = true;
            return Ok(self.param(v));
        }
        if first == "@request" {
            return self.resolve_request(scope, p);
        }
        let mut walk = self.walk(scope, &scope.coll, &scope.alias, scope.allow_hidden);
        if first == "@collection" {
            if p.segments.len() < 3 {
                return resolve_err(format!(
                    "invalid @collection path {:?}",
                    p.segments.join(".")
                ));
            }
            let key = &p.segments[1];
            let Some(coll) = self.schema.by_id_or_name(key).cloned() else {
                return resolve_err(format!("unknown collection {key:?}"));
            };
            let alias = match &p.alias {
                Some(a) => format!("__collection_alias_{a}"),
                None => format!("__collection_{}", coll.name),
            };
            self.register_join(Join {
                table: qi(&coll.name),
                alias: alias.clone(),
                on: None,
            })?;
            let mm_alias = format!("__mm{alias}");
            walk.mm.joins.push(Join {
                table: qi(&coll.name),
                alias: mm_alias.clone(),
                on: None,
            });
            walk.coll = coll;
            walk.alias = alias;
            walk.mm_alias = mm_alias;
            walk.with_mm = true;
            walk.allow_hidden = true;
            return self.walk_props(scope, walk, &p.segments[2..], p.modifier);
        }
        if first.starts_with('@') {
            return resolve_err(format!("unknown identifier {first:?}"));
        }
        self.walk_props(scope, walk, &p.segments, p.modifier)
    }

    fn walk(&self, scope: &Scope, coll: &Arc<Collection>, alias: &str, allow_hidden: bool) -> Walk {
        let mm_alias = format!("__mm_{}", scope.alias);
        Walk {
            coll: Arc::clone(coll),
            alias: alias.to_owned(),
            allow_hidden,
            nullify_missing: false,
            mm: MultiMatch {
                from_table: qi(&scope.coll.name),
                from_alias: mm_alias.clone(),
                base_alias: scope.alias.clone(),
                joins: Vec::new(),
                value: String::new(),
            },
            mm_alias,
            with_mm: false,
            hops: 0,
        }
    }

    /// Walk `props` from the walk's collection: relations and back-relations join, json and
    /// geoPoint fields take the rest as a JSON path, the last prop is a field.
    fn walk_props(
        &mut self,
        scope: &Scope,
        mut w: Walk,
        props: &[String],
        modifier: Option<Modifier>,
    ) -> Result<Res, QueryError> {
        for (i, prop) in props.iter().enumerate() {
            if i + 1 == props.len() {
                return self.last_prop(w, prop, modifier);
            }
            let coll = Arc::clone(&w.coll);
            let field = coll.field(prop);
            if let Some(f) = field
                && f.hidden
                && !w.allow_hidden
            {
                return resolve_err(format!("non-filterable field {prop:?}"));
            }
            if let Some(f) = field
                && matches!(f.kind, FieldType::Json | FieldType::GeoPoint)
            {
                let mut path = String::new();
                for (j, seg) in props[i + 1..].iter().enumerate() {
                    // PocketBase strips the ':' of a modifier on a json path and keeps its name.
                    let seg = if i + 1 + j + 1 == props.len()
                        && let Some(m) = modifier
                    {
                        format!("{seg}{}", modifier_name(m))
                    } else {
                        seg.clone()
                    };
                    if seg.bytes().all(|b| b.is_ascii_digit()) {
                        path.push_str(&format!("[{seg}]"));
                    } else {
                        path.push('.');
                        path.push_str(&seg);
                    }
                }
                let col = format!("{}.{}", qi(&w.alias), qi(&f.name));
                let mut res = Res {
                    no_coalesce: true,
                    ..Res::expr(json_extract(&col, &path))
                };
                if w.with_mm {
                    w.mm.value =
                        json_extract(&format!("{}.{}", qi(&w.mm_alias), qi(&f.name)), &path);
                    res.multi = Some(Box::new(w.mm));
                }
                return Ok(res);
            }
            w.hops += 1;
            if w.hops > MAX_RELATION_DEPTH {
                return resolve_err(format!("max relation depth ({MAX_RELATION_DEPTH}) reached"));
            }
            match field {
                None => self.join_back_relation(scope, &mut w, prop)?,
                Some(f) if f.kind == FieldType::Relation => {
                    let target_id = f.opt_str("collectionId").to_owned();
                    let Some(target) = self.schema.by_id_or_name(&target_id).cloned() else {
                        return resolve_err(format!("failed to load the collection of {prop:?}"));
                    };
                    let multiple = f.is_multi();
                    // `single.id` is the relation column itself: no join (and so no listRule).
                    if !multiple
                        && i + 2 == props.len()
                        && props[i + 1] == "id"
                        && modifier.is_none()
                    {
                        let mut res = Res::expr(format!("{}.{}", qi(&w.alias), qi(prop)));
                        if w.with_mm {
                            w.mm.value = format!("{}.{}", qi(&w.mm_alias), qi(prop));
                            res.multi = Some(Box::new(w.mm));
                        }
                        return Ok(res);
                    }
                    let new_alias = format!("{}_{prop}", w.alias);
                    let col = format!("{}.{}", qi(&w.alias), qi(prop));
                    if multiple {
                        let je = format!("__je_{}_{prop}", w.alias);
                        self.register_join(Join {
                            table: json_each(&col),
                            alias: je.clone(),
                            on: None,
                        })?;
                        self.register_join(Join {
                            table: qi(&target.name),
                            alias: new_alias.clone(),
                            on: Some(format!("{}.`id` = {}.`value`", qi(&new_alias), qi(&je))),
                        })?;
                    } else {
                        self.register_join(Join {
                            table: qi(&target.name),
                            alias: new_alias.clone(),
                            on: Some(format!("{}.`id` = {col}", qi(&new_alias))),
                        })?;
                    }
                    let new_mm = format!("{}_{prop}", w.mm_alias);
                    let mm_col = format!("{}.{}", qi(&w.mm_alias), qi(prop));
                    if multiple {
                        w.with_mm = true;
                        let je2 = format!("{}_{prop}_je", w.mm_alias);
                        w.mm.joins.push(Join {
                            table: json_each(&mm_col),
                            alias: je2.clone(),
                            on: None,
                        });
                        w.mm.joins.push(Join {
                            table: qi(&target.name),
                            alias: new_mm.clone(),
                            on: Some(format!("{}.`id` = {}.`value`", qi(&new_mm), qi(&je2))),
                        });
                    } else {
                        w.mm.joins.push(Join {
                            table: qi(&target.name),
                            alias: new_mm.clone(),
                            on: Some(format!("{}.`id` = {mm_col}", qi(&new_mm))),
                        });
                    }
                    if !w.allow_hidden {
                        self.join_list_rule(scope, &target, &new_alias)?;
                    }
                    w.coll = target;
                    w.alias = new_alias;
                    w.mm_alias = new_mm;
                }
                Some(_) => return resolve_err(format!("field {prop:?} is not a valid relation")),
            }
        }
        resolve_err("empty field path")
    }

    /// `<collection>_via_<field>`: the records of another collection whose relation points here.
    fn join_back_relation(
        &mut self,
        scope: &Scope,
        w: &mut Walk,
        prop: &str,
    ) -> Result<(), QueryError> {
        let BackRelation {
            source: back,
            field,
            multi: rel_multi,
            unique,
        } = back_relation(self.schema, &w.coll, prop).map_err(QueryError::Resolve)?;
        let bf = &back.fields[field];
        if bf.hidden && !w.allow_hidden {
            return resolve_err(format!("non-filterable back-relation field {:?}", bf.name));
        }
        let back_multi = rel_multi || !unique;
        let new_alias = format!("{}_{prop}", w.alias);
        let on = if rel_multi {
            let je = format!("__je_{new_alias}");
            format!(
                "{}.`id` IN (SELECT {}.`value` FROM {} {})",
                qi(&w.alias),
                qi(&je),
                json_each(&format!("{}.{}", qi(&new_alias), qi(&bf.name))),
                qi(&je)
            )
        } else {
            format!(
                "{}.{} = {}.`id`",
                qi(&new_alias),
                qi(&bf.name),
                qi(&w.alias)
            )
        };
        self.register_join(Join {
            table: qi(&back.name),
            alias: new_alias.clone(),
            on: Some(on),
        })?;
        let new_mm = format!("{}_{prop}", w.mm_alias);
        let mm_on = if rel_multi {
            let je = format!("__je_{new_mm}");
            format!(
                "{}.`id` IN (SELECT {}.`value` FROM {} {})",
                qi(&w.mm_alias),
                qi(&je),
                json_each(&format!("{}.{}", qi(&new_mm), qi(&bf.name))),
                qi(&je)
            )
        } else {
            format!(
                "{}.{} = {}.`id`",
                qi(&new_mm),
                qi(&bf.name),
                qi(&w.mm_alias)
            )
        };
        w.mm.joins.push(Join {
            table: qi(&back.name),
            alias: new_mm.clone(),
            on: Some(mm_on),
        });
        if back_multi {
            w.with_mm = true;
        }
        if !w.allow_hidden {
            self.join_list_rule(scope, &back, &new_alias)?;
        }
        w.coll = back;
        w.alias = new_alias;
        w.mm_alias = new_mm;
        Ok(())
    }

    /// A non-superuser's filter may only see joined rows the joined collection's listRule admits.
    fn join_list_rule(
        &mut self,
        scope: &Scope,
        coll: &Arc<Collection>,
        alias: &str,
    ) -> Result<(), QueryError> {
        let rule = match &coll.rules.list {
            None => {
                return resolve_err(format!(
                    "the listRule of {:?} allows only superusers",
                    coll.name
                ));
            }
            Some(r) if r.trim().is_empty() => return Ok(()),
            Some(r) => r.clone(),
        };
        if self.join_rules.iter().any(|(a, _)| a == alias) {
            return Ok(());
        }
        if scope.nesting >= MAX_RULE_NESTING {
            return resolve_err("listRules nest too deeply");
        }
        let Some(expr) = parse::parse_filter(&rule)? else {
            return Ok(());
        };
        let inner = Scope {
            coll: Arc::clone(coll),
            alias: alias.to_owned(),
            allow_hidden: true,
            nesting: scope.nesting + 1,
        };
        let cond = self.expr(&inner, &expr)?;
        let id = format!("{}.`id`", qi(alias));
        self.join_rules.push((
            alias.to_owned(),
            format!("(({id} = '' OR {id} IS NULL) OR ({cond}))"),
        ));
        Ok(())
    }

    fn last_prop(
        &mut self,
        mut w: Walk,
        prop: &str,
        modifier: Option<Modifier>,
    ) -> Result<Res, QueryError> {
        let coll = Arc::clone(&w.coll);
        let Some(f) = coll.field(prop) else {
            if w.nullify_missing {
                return Ok(Res::ident("NULL", Kind::Null));
            }
            return resolve_err(format!("unknown field {prop:?}"));
        };
        if f.hidden && !w.allow_hidden {
            return resolve_err(format!("non-filterable field {prop:?}"));
        }
        let multivaluer = matches!(
            f.kind,
            FieldType::Select | FieldType::Relation | FieldType::File
        );
        let col = format!("{}.{}", qi(&w.alias), qi(&f.name));
        let mm_col = format!("{}.{}", qi(&w.mm_alias), qi(&f.name));
        if modifier == Some(Modifier::Length) && multivaluer {
            let mut res = Res::expr(json_array_length(&col));
            if w.with_mm {
                w.mm.value = json_array_length(&mm_col);
                res.multi = Some(Box::new(w.mm));
            }
            return Ok(res);
        }
        if modifier == Some(Modifier::Each) && multivaluer && f.is_multi() {
            let je = format!("__je_{}_{}", w.alias, f.name);
            self.register_join(Join {
                table: json_each(&col),
                alias: je.clone(),
                on: None,
            })?;
            let je2 = format!("__je_{}_{}", w.mm_alias, f.name);
            w.mm.joins.push(Join {
                table: json_each(&mm_col),
                alias: je2.clone(),
                on: None,
            });
            w.mm.value = format!("{}.`value`", qi(&je2));
            return Ok(Res {
                multi: Some(Box::new(w.mm)),
                ..Res::expr(format!("{}.`value`", qi(&je)))
            });
        }
        let mut res = Res::expr(col.clone());
        let mut mm_value = mm_col.clone();
        if f.name == "email" && !w.allow_hidden && coll.is_auth() {
            res.after = Some(format!("{}.`emailVisibility` = TRUE", qi(&w.alias)));
        }
        if f.kind == FieldType::Json {
            res.no_coalesce = true;
            res.sql = json_extract(&col, "");
            mm_value = json_extract(&mm_col, "");
        }
        if modifier == Some(Modifier::Lower) {
            res.sql = format!("LOWER({})", res.sql);
            mm_value = format!("LOWER({mm_value})");
        }
        if w.with_mm {
            w.mm.value = mm_value;
            res.multi = Some(Box::new(w.mm));
        }
        Ok(res)
    }

    // --- @request.* -------------------------------------------------------------------------

    fn resolve_request(&mut self, scope: &Scope, p: &Path) -> Result<Res, QueryError> {
        let seg = |i: usize| p.segments.get(i).map(String::as_str);
        match (seg(1), p.segments.len()) {
            (Some("context"), 2) => {
                return Ok(self.param(Stored::Text(self.req.context.clone())));
            }
            (Some("method"), 2) => return Ok(self.param(Stored::Text(self.req.method.clone()))),
            _ => {}
        }
        if seg(1) == Some("auth") && p.segments.len() >= 3 {
            let Some(auth) = &self.req.auth else {
                return Ok(Res::ident("NULL", Kind::Null));
            };
            let simple = p.segments.len() == 3
                && !matches!(p.modifier, Some(Modifier::Each | Modifier::Length));
            if simple {
                return Ok(self.static_value(&p.segments[1..], p.modifier));
            }
            let coll_name = auth
                .get("collectionName")
                .and_then(Value::as_str)
                .unwrap_or("");
            let auth_id = auth
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let Some(coll) = self.schema.by_name(coll_name).cloned() else {
                return Ok(Res::ident("NULL", Kind::Null));
            };
            let alias = format!("__auth_{}", coll.name);
            let (ph, _) = self.bind(Stored::Text(auth_id));
            self.register_join(Join {
                table: qi(&coll.name),
                alias: alias.clone(),
                on: Some(format!("{}.`id` = {ph}", qi(&alias))),
            })?;
            let mut w = self.walk(scope, &coll, &alias, true);
            let mm_alias = format!("__mm_{alias}");
            w.mm.joins.push(Join {
                table: qi(&coll.name),
                alias: mm_alias.clone(),
                on: Some(format!("{}.`id` = {ph}", qi(&mm_alias))),
            });
            w.mm_alias = mm_alias;
            w.nullify_missing = true;
            return self.walk_props(scope, w, &p.segments[2..], p.modifier);
        }
        if seg(1) == Some("body") && p.segments.len() >= 3 {
            let name = &p.segments[2];
            if let Some(f) = scope.coll.field(name) {
                if f.kind == FieldType::Relation && p.segments.len() > 3 {
                    let (target_key, multi) = (f.opt_str("collectionId").to_owned(), f.is_multi());
                    return self.body_relation(scope, name, &target_key, multi, p);
                }
                if p.segments.len() == 3 {
                    match p.modifier {
                        Some(Modifier::Each) => return self.body_each(scope, name),
                        Some(Modifier::Length) => {
                            let n = body_items(self.req.body.get(name.as_str())).len();
                            return Ok(self.param(Stored::Int(n as i64)));
                        }
                        Some(Modifier::Changed) => return self.body_changed(scope, name),
                        _ => {}
                    }
                }
            }
        }
        Ok(self.static_value(&p.segments[1..], p.modifier))
    }

    /// A plain `@request.<section>.<key>...` value, bound as a parameter.
    fn static_value(&mut self, path: &[String], modifier: Option<Modifier>) -> Res {
        let mut cur: Option<Value> = match path.first().map(String::as_str) {
            Some("auth") => self.req.auth.clone().map(Value::Object),
            Some("body") => Some(Value::Object(self.req.body.clone())),
            Some("query") => Some(Value::Object(self.req.query.clone())),
            Some("headers") => {
                self.volatile = true;
                Some(Value::Object(self.req.headers.clone()))
            }
            Some("method") => Some(Value::String(self.req.method.clone())),
            Some("context") => Some(Value::String(self.req.context.clone())),
            _ => None,
        };
        for key in path.iter().skip(1) {
            cur = match cur {
                Some(Value::Object(mut o)) => o.remove(key.as_str()),
                Some(Value::Array(mut a)) => match key.parse::<usize>() {
                    Ok(i) if i < a.len() => Some(a.swap_remove(i)),
                    _ => None,
                },
                _ => None,
            };
        }
        if modifier == Some(Modifier::Isset) {
            return Res::ident(if cur.is_some() { "TRUE" } else { "FALSE" }, Kind::Const);
        }
        let last = path.last().map(String::as_str).unwrap_or("");
        let stored = match cur {
            None | Some(Value::Null) => return Res::ident("NULL", Kind::Null),
            Some(Value::String(s)) => {
                let numeric = self
                    .base
                    .field(last)
                    .is_some_and(|f| f.kind == FieldType::Number);
                match s.trim().parse::<f64>() {
                    Ok(n) if numeric && s.trim() == s && !s.is_empty() => Stored::Real(n),
                    _ => Stored::Text(s),
                }
            }
            Some(Value::Bool(b)) => Stored::Int(i64::from(b)),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => Stored::Int(i),
                None => Stored::Real(n.as_f64().unwrap_or(0.0)),
            },
            Some(other) => Stored::Text(other.to_string()),
        };
        let mut res = self.param(stored);
        if modifier == Some(Modifier::Lower) {
            res.sql = format!("LOWER({})", res.sql);
        }
        res
    }

    /// `@request.body.<relation>.<field>...`: the submitted ids joined to their collection.
    fn body_relation(
        &mut self,
        scope: &Scope,
        name: &str,
        target_key: &str,
        multi: bool,
        p: &Path,
    ) -> Result<Res, QueryError> {
        let Some(target) = self.schema.by_id_or_name(target_key).cloned() else {
            return resolve_err(format!("failed to load the collection of {name:?}"));
        };
        let ids = body_items(self.req.body.get(name));
        let json = Value::Array(ids.into_iter().map(Value::String).collect()).to_string();
        let (ph, _) = self.bind(Stored::Text(json));
        let alias = format!("__data_{}_{name}", target.name);
        let on = |a: &str| format!("{}.`id` IN (SELECT `value` FROM json_each({ph}))", qi(a));
        self.register_join(Join {
            table: qi(&target.name),
            alias: alias.clone(),
            on: Some(on(&alias)),
        })?;
        let mut w = self.walk(scope, &target, &alias, true);
        let mm_alias = format!("__mm{alias}");
        w.mm.joins.push(Join {
            table: qi(&target.name),
            alias: mm_alias.clone(),
            on: Some(on(&mm_alias)),
        });
        w.mm_alias = mm_alias;
        w.with_mm = multi;
        w.nullify_missing = true;
        self.walk_props(scope, w, &p.segments[3..], p.modifier)
    }

    /// `@request.body.<multi>:each`: the submitted items as joined rows.
    fn body_each(&mut self, scope: &Scope, name: &str) -> Result<Res, QueryError> {
        let items = body_items(self.req.body.get(name));
        let json = Value::Array(items.into_iter().map(Value::String).collect()).to_string();
        let (ph, _) = self.bind(Stored::Text(json));
        let alias = format!("__dataEach_{name}_je");
        self.register_join(Join {
            table: format!("json_each({ph})"),
            alias: alias.clone(),
            on: None,
        })?;
        let mut w = self.walk(scope, &scope.coll, &scope.alias, true);
        let mm_alias = format!("__mm{alias}");
        w.mm.joins.push(Join {
            table: format!("json_each({ph})"),
            alias: mm_alias.clone(),
            on: None,
        });
        w.mm.value = format!("{}.`value`", qi(&mm_alias));
        Ok(Res {
            multi: Some(Box::new(w.mm)),
            ..Res::expr(format!("{}.`value`", qi(&alias)))
        })
    }

    /// `@request.body.x:changed`: submitted, and different from the stored value.
    fn body_changed(&mut self, scope: &Scope, name: &str) -> Result<Res, QueryError> {
        let path = ["body".to_owned(), name.to_owned()];
        let isset = self.static_value(&path, Some(Modifier::Isset));
        let data = self.static_value(&path, None);
        let current = {
            let w = self.walk(scope, &scope.coll, &scope.alias, true);
            self.last_prop(w, name, None)?
        };
        let differs = self.equal(false, &data, &current);
        let mut res = Res::expr(format!("({} = TRUE AND {differs})", isset.sql));
        res.params = data.params;
        Ok(res)
    }
}

fn body_items(v: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for x in a {
                match x {
                    Value::String(s) => push(s.clone()),
                    Value::Null => {}
                    other => push(other.to_string()),
                }
            }
        }
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => push(s.clone()),
        Some(other) => push(other.to_string()),
    }
    out
}

fn modifier_name(m: Modifier) -> &'static str {
    match m {
        Modifier::Isset => "isset",
        Modifier::Changed => "changed",
        Modifier::Length => "length",
        Modifier::Each => "each",
        Modifier::Lower => "lower",
    }
}

fn macro_value(name: &str) -> Option<Stored> {
    use chrono::{DateTime, Datelike, Duration, NaiveDate, Timelike, Utc};
    let now = Utc::now();
    let midnight = |d: NaiveDate| d.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    let first_of =
        |year: i32, month: u32| NaiveDate::from_ymd_opt(year, month, 1).and_then(midnight);
    // The last millisecond before `next`: how the *End macros are defined.
    let before = |next: DateTime<Utc>| next - Duration::milliseconds(1);
    let (year, month) = (now.year(), now.month());
    let time = match name {
        "@now" => now,
        "@yesterday" => now - Duration::days(1),
        "@tomorrow" => now + Duration::days(1),
        "@todayStart" => midnight(now.date_naive())?,
        "@todayEnd" => before(midnight(now.date_naive())? + Duration::days(1)),
        "@monthStart" => first_of(year, month)?,
        "@monthEnd" if month == 12 => before(first_of(year + 1, 1)?),
        "@monthEnd" => before(first_of(year, month + 1)?),
        "@yearStart" => first_of(year, 1)?,
        "@yearEnd" => before(first_of(year + 1, 1)?),
        _ => {
            let n = match name {
                "@second" => now.second(),
                "@minute" => now.minute(),
                "@hour" => now.hour(),
                "@day" => now.day(),
                "@month" => month,
                "@weekday" => now.weekday().num_days_from_sunday(),
                "@year" => return Some(Stored::Int(i64::from(year))),
                _ => return None,
            };
            return Some(Stored::Int(i64::from(n)));
        }
    };
    Some(Stored::Text(crate::schema::ids::format_time(time)))
}

/// Does a rule's result depend on more than data, query string and caller (`@request.headers`,
/// the clock)? A textual check, so it errs on the side of "yes".
pub(crate) fn is_volatile_text(rule: &str) -> bool {
    rule.contains("@request.headers")
        || [
            "@now",
            "@second",
            "@minute",
            "@hour",
            "@day",
            "@month",
            "@weekday",
            "@year",
            "@yesterday",
            "@tomorrow",
            "@today",
        ]
        .iter()
        .any(|m| rule.contains(m))
}

fn forbid_request_refs(text: &str) -> Result<(), QueryError> {
    for field in ["@collection.", "@request."] {
        if text.contains(field) {
            return Err(QueryError::Forbidden(field));
        }
    }
    Ok(())
}

/// A client's filter and sort may not name `@collection.` or `@request.` (superusers aside).
/// Checked on the raw texts, filter first, before either is parsed: PocketBase answers 403 for
/// them even when the rest of the text would not parse.
pub(crate) fn forbid_client_refs(
    filter: Option<&str>,
    sort: Option<&str>,
) -> Result<(), QueryError> {
    filter
        .into_iter()
        .chain(sort)
        .try_for_each(forbid_request_refs)
}

/// Compile one API rule on its own (view/update/delete/auth rules and rule validation).
pub(crate) fn compile_rule(
    schema: &Schema,
    coll: &Collection,
    text: &str,
    req: &RequestInfo,
) -> Result<Select, QueryError> {
    let mut q = Query::new(schema, coll, req);
    q.rule(text)?;
    Ok(q.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::define::build;
    use serde_json::json;

    fn schema() -> Schema {
        let tags = build(
            &json!({"id": "pbc_tags", "name": "tags", "listRule": "rank > 0",
                "fields": [{"name": "name", "type": "text"}, {"name": "rank", "type": "number"}]}),
            None,
            &Schema::default(),
        )
        .unwrap();
        let first = Schema::new(vec![tags.clone()]);
        let posts = build(
            &json!({"id": "pbc_posts", "name": "posts", "fields": [
                {"name": "title", "type": "text"}, {"name": "views", "type": "number"},
                {"name": "meta", "type": "json"}, {"name": "secret", "type": "text", "hidden": true},
                {"name": "tags", "type": "relation", "collectionId": "pbc_tags", "maxSelect": 3}]}),
            None,
            &first,
        )
        .unwrap();
        Schema::new(vec![tags, posts])
    }

    fn compile(filter: &str, req: &RequestInfo) -> Result<Select, QueryError> {
        let s = schema();
        let posts = s.by_name("posts").unwrap().clone();
        let mut q = Query::new(&s, &posts, req);
        q.filter(filter)?;
        Ok(q.finish())
    }

    fn superuser() -> RequestInfo {
        RequestInfo {
            is_superuser: true,
            ..RequestInfo::default()
        }
    }

    #[test]
    fn like_patterns_follow_pocketbase_escaping() {
        assert_eq!(like_pattern("a_b"), "%a\\_b%");
        assert_eq!(like_pattern("100%"), "100%");
        assert_eq!(like_pattern("100\\%"), "%100\\%%");
        assert_eq!(like_pattern("a\\"), "%a\\\\%");
        assert_eq!(like_pattern(""), "%%");
        assert!(contains_unescaped("a%", '%'));
        assert!(!contains_unescaped("a\\%", '%'));
        assert!(contains_unescaped("a\\\\%", '%'));
    }

    #[test]
    fn unused_params_are_dropped_and_the_rest_renumbered_in_reading_order() {
        let s = compile(r#"title = "" && views > 3 && title != "x""#, &superuser()).unwrap();
        assert_eq!(
            s.where_sql,
            "(((`posts`.`title` = '' OR `posts`.`title` IS NULL) AND `posts`.`views` > ?1) AND `posts`.`title` IS NOT ?2)"
        );
        assert_eq!(s.params, vec![Stored::Real(3.0), Stored::Text("x".into())]);
    }

    #[test]
    fn plain_operators_over_multi_relations_mean_every_value() {
        let s = compile(r#"tags.name = "a""#, &superuser()).unwrap();
        assert!(s.joins.contains("LEFT JOIN json_each("), "{}", s.joins);
        assert!(
            s.where_sql
                .contains("NOT EXISTS (SELECT 1 FROM (SELECT `__mm_posts_tags`.`name`"),
            "{}",
            s.where_sql
        );
        let any = compile(r#"tags.name ?= "a""#, &superuser()).unwrap();
        assert!(!any.where_sql.contains("NOT EXISTS"), "{}", any.where_sql);
    }

    #[test]
    fn guests_joins_carry_the_joined_list_rule_and_hidden_fields_stay_hidden() {
        let s = compile(r#"tags.name ?= "a""#, &RequestInfo::default()).unwrap();
        assert!(
            s.where_sql.contains("`posts_tags`.`rank` > ?"),
            "{}",
            s.where_sql
        );
        assert!(matches!(
            compile("secret = 'x'", &RequestInfo::default()),
            Err(QueryError::Resolve(_))
        ));
        assert!(compile("secret = 'x'", &superuser()).is_ok());
        assert_eq!(
            compile("@request.auth.id != ''", &RequestInfo::default()),
            Err(QueryError::Forbidden("@request."))
        );
    }

    #[test]
    fn rules_see_request_values_as_bound_parameters() {
        let mut req = RequestInfo::default();
        let mut a = Map::new();
        a.insert("id".into(), json!("abc"));
        req.auth = Some(a);
        let s = schema();
        let posts = s.by_name("posts").unwrap().clone();
        let mut q = Query::new(&s, &posts, &req);
        q.rule("@request.auth.id != '' && title = @request.auth.id")
            .unwrap();
        let sel = q.finish();
        assert_eq!(sel.where_sql, "(?1 IS NOT '' AND `posts`.`title` = ?2)");
        assert_eq!(
            sel.params,
            vec![Stored::Text("abc".into()), Stored::Text("abc".into())]
        );
        let nobody = RequestInfo::default();
        let mut guest = Query::new(&s, &posts, &nobody);
        guest.rule("@request.auth.id != ''").unwrap();
        assert_eq!(guest.finish().where_sql, "'' IS NOT ''");
    }

    #[test]
    fn sort_keys_compile_with_their_joins() {
        let s = schema();
        let posts = s.by_name("posts").unwrap().clone();
        let su = superuser();
        let mut q = Query::new(&s, &posts, &su);
        q.sort("-views,+title,@rowid,tags.name").unwrap();
        let sel = q.finish();
        assert_eq!(
            sel.order_sql,
            "`posts`.`views` DESC, `posts`.`title` ASC, `posts`.`_rowid_` ASC, `posts_tags`.`name` ASC"
        );
        assert!(sel.joins.contains("`posts_tags`"));
        let mut bad = Query::new(&s, &posts, &su);
        assert!(bad.sort("nope").is_err());
    }

    #[test]
    fn date_macros_bind_stored_date_text_and_numbers() {
        let Some(Stored::Text(t)) = macro_value("@monthEnd") else {
            panic!()
        };
        assert!(t.ends_with(" 23:59:59.999Z"), "{t}");
        let Some(Stored::Text(t)) = macro_value("@yearStart") else {
            panic!()
        };
        assert!(t.ends_with("-01-01 00:00:00.000Z"), "{t}");
        assert!(matches!(macro_value("@weekday"), Some(Stored::Int(0..=6))));
        assert!(macro_value("@nope").is_none());
    }
}
