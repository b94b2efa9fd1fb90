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

mod compare;
pub(crate) mod parse;
mod paths;
mod request;
mod sql;

use crate::schema::value::Stored;
use crate::schema::{Collection, FieldType, Schema};
use serde_json::{Map, Value};
use sql::has_single_column_unique_index;
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
    let mut out = String::with_capacity(name.len() + 2);
    push_qi(&mut out, name);
    out
}

/// [`qi`] appended to `out` (no string of its own: statements built per write use it).
pub(crate) fn push_qi(out: &mut String, name: &str) {
    out.push('`');
    if name.contains('`') {
        out.push_str(&name.replace('`', "``"));
    } else {
        out.push_str(name);
    }
    out.push('`');
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
    /// A `strftime` result: PocketBase enforces its NULL fallback, so its bound parameters
    /// never make it known empty or known non-empty in `=`/`!=` (it may be NULL either way).
    Enforced,
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
        // The schema's own copy when it is this collection (no clone on the read path); a
        // collection being defined may share its id and name with an existing one (a create
        // that is refused for it) and its rules must still see its own fields.
        let same = |c: &Collection| {
            std::ptr::eq(c, base)
                || (c.name == base.name
                    && c.fields.len() == base.fields.len()
                    && c.fields
                        .iter()
                        .zip(&base.fields)
                        .all(|(a, b)| a.name == b.name && a.kind == b.kind))
        };
        let base = schema
            .by_id(&base.id)
            .filter(|c| same(c))
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
        let Some(expr) = parse::parse_rule(text)? else {
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

    /// Join one step of a path walk twice by the same formula: into the statement, hanging off
    /// `w.alias` (the "any value" side), and into the walk's "every value" subquery, hanging off
    /// `w.mm_alias`. `to` names the aliases the step introduces on each side (`[any, every]`);
    /// `join(from, to)` gives the joined table and its ON condition. The walk then stands at `to`.
    fn twin_join(
        &mut self,
        w: &mut Walk,
        to: [String; 2],
        join: impl Fn(&str, &str) -> (String, Option<String>),
    ) -> Result<(), QueryError> {
        let [any, every] = to;
        let (table, on) = join(&w.alias, &any);
        self.register_join(Join {
            table,
            alias: any.clone(),
            on,
        })?;
        let (table, on) = join(&w.mm_alias, &every);
        w.mm.joins.push(Join {
            table,
            alias: every.clone(),
            on,
        });
        w.alias = any;
        w.mm_alias = every;
        Ok(())
    }

    fn next_sub_alias(&mut self, prefix: &str) -> String {
        self.sub_alias += 1;
        format!("{prefix}{}", self.sub_alias)
    }
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
    use super::request::macro_value;
    use super::sql::{contains_unescaped, like_pattern};
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
