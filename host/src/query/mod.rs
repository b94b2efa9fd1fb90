//! PocketBase's filter / sort language -> SQLite SQL with bound parameters. Pure: no IO, no async.
//! Identifiers in the SQL come only from the schema; every user value is a bound parameter.

pub(crate) mod parse;

use crate::schema::value::Stored;
use crate::schema::{Collection, Field, FieldType};
use parse::{Expr, Modifier, Op, Operand, Path};
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum QueryError {
    #[error("parse: {0}")]
    Parse(String),
    #[error("invalid left or right operand: {0}")]
    Resolve(String),
    /// Part of the language this build does not compile yet; the request gets PocketBase's 400
    /// instead of a silently wrong list.
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// Client filters and sorts may not use `@request.` / `@collection.` (PocketBase: 403).
    #[error("Only superusers can filter by {0}")]
    Forbidden(&'static str),
}

impl From<parse::ParseError> for QueryError {
    fn from(e: parse::ParseError) -> Self {
        Self::Parse(e.0)
    }
}

/// A compiled query fragment. The store splices these into its statement.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Select {
    pub joins: String,
    pub where_sql: String,
    pub order_sql: String,
    pub params: Vec<Stored>,
}

impl Select {
    /// AND another compiled condition into this one.
    pub(crate) fn and(&mut self, other: Select) {
        if other.where_sql.is_empty() {
            return;
        }
        self.where_sql = if self.where_sql.is_empty() {
            other.where_sql
        } else {
            format!("({}) AND ({})", self.where_sql, other.where_sql)
        };
        self.joins.push_str(&other.joins);
        self.params.extend(other.params);
    }
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

fn qi(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// One side of a comparison once resolved.
#[derive(Debug, Clone)]
enum Side {
    /// SQL expression over the current table.
    Sql(String),
    Param(Stored),
    Null,
}

impl Side {
    fn is_empty_literal(&self) -> bool {
        matches!(self, Side::Null) || matches!(self, Side::Param(Stored::Text(t)) if t.is_empty())
    }
}

struct Compiler<'a> {
    coll: &'a Collection,
    req: &'a RequestInfo,
    params: Vec<Stored>,
    /// Client filters hide hidden fields from non-superusers; rules see everything.
    client: bool,
}

fn json_value_to_stored(v: &Value) -> Side {
    match v {
        Value::Null => Side::Null,
        Value::Bool(b) => Side::Param(Stored::Int(i64::from(*b))),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Side::Param(Stored::Int(i)),
            None => Side::Param(Stored::Real(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => Side::Param(Stored::Text(s.clone())),
        other => Side::Param(Stored::Text(other.to_string())),
    }
}

fn macro_value(name: &str) -> Option<Side> {
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
                "@year" => return Some(Side::Param(Stored::Int(i64::from(year)))),
                _ => return None,
            };
            return Some(Side::Param(Stored::Int(i64::from(n))));
        }
    };
    Some(Side::Param(Stored::Text(crate::schema::ids::format_time(
        time,
    ))))
}

/// The SQL that reads a json column as a JSON value (PocketBase stores JSON with NUMERIC affinity).
fn json_extract(col: &str, path: &str) -> String {
    format!(
        "(CASE WHEN json_valid({col}) THEN JSON_EXTRACT({col}, '{path}') ELSE JSON_EXTRACT(json_object('pb', {col}), '$.pb') END)"
    )
}

fn multi_as_array(col: &str) -> String {
    format!(
        "(CASE WHEN iif(json_valid({col}), json_type({col}) = 'array', FALSE) THEN {col} ELSE (CASE WHEN {col} = '' OR {col} IS NULL THEN json_array() ELSE json_array({col}) END) END)"
    )
}

impl<'a> Compiler<'a> {
    fn bind(&mut self, v: Stored) -> String {
        self.params.push(v);
        "?".to_owned()
    }

    fn field(&self, name: &str) -> Result<&'a Field, QueryError> {
        let f = self
            .coll
            .field(name)
            .ok_or_else(|| QueryError::Resolve(format!("unknown field {name:?}")))?;
        if self.client && !self.req.is_superuser && f.hidden {
            return Err(QueryError::Resolve(format!(
                "non-filterable field {name:?}"
            )));
        }
        Ok(f)
    }

    fn resolve_path(&mut self, p: &Path) -> Result<Side, QueryError> {
        let first = p.segments.first().map(String::as_str).unwrap_or("");
        if first == "@request" {
            return self.resolve_request(p);
        }
        if first == "@collection" {
            return Err(QueryError::Unsupported("@collection joins".into()));
        }
        if first.starts_with('@') {
            if p.segments.len() != 1 || p.modifier.is_some() {
                return Err(QueryError::Resolve(format!("unknown macro {first}")));
            }
            return macro_value(first)
                .ok_or_else(|| QueryError::Resolve(format!("unknown macro {first}")));
        }
        if p.segments.len() == 1 && self.coll.field(first).is_none() {
            match first {
                "null" => return Ok(Side::Null),
                "true" => return Ok(Side::Param(Stored::Int(1))),
                "false" => return Ok(Side::Param(Stored::Int(0))),
                _ => {}
            }
        }
        if first.contains("_via_") {
            return Err(QueryError::Unsupported("back-relations".into()));
        }
        let f = self.field(first)?;
        let col = format!("{}.{}", qi(&self.coll.name), qi(&f.name));
        let base = if p.segments.len() > 1 {
            match f.kind {
                FieldType::Json => {
                    let mut path = String::from("$");
                    for s in &p.segments[1..] {
                        if s.chars().all(|c| c.is_ascii_digit()) {
                            path.push_str(&format!("[{s}]"));
                        } else if s.chars().all(|c| c.is_alphanumeric() || c == '_') {
                            path.push('.');
                            path.push_str(s);
                        } else {
                            return Err(QueryError::Resolve(format!(
                                "invalid json path segment {s:?}"
                            )));
                        }
                    }
                    json_extract(&col, &path)
                }
                FieldType::GeoPoint
                    if p.segments.len() == 2 && matches!(p.segments[1].as_str(), "lon" | "lat") =>
                {
                    format!("JSON_EXTRACT({col}, '$.{}')", p.segments[1])
                }
                FieldType::Relation => {
                    return Err(QueryError::Unsupported("relation paths".into()));
                }
                _ => {
                    return Err(QueryError::Resolve(format!(
                        "field {first:?} has no sub-fields"
                    )));
                }
            }
        } else if f.kind == FieldType::Json {
            json_extract(&col, "$")
        } else {
            col
        };
        match p.modifier {
            None => Ok(Side::Sql(base)),
            Some(Modifier::Lower) => Ok(Side::Sql(format!("LOWER({base})"))),
            Some(Modifier::Length) if f.is_multi() && p.segments.len() == 1 => Ok(Side::Sql(
                format!("json_array_length({})", multi_as_array(&base)),
            )),
            Some(Modifier::Each) => Err(QueryError::Unsupported(":each".into())),
            Some(m) => Err(QueryError::Resolve(format!(
                "modifier {m:?} is not allowed on {first:?}"
            ))),
        }
    }

    fn resolve_request(&mut self, p: &Path) -> Result<Side, QueryError> {
        let seg = |i: usize| p.segments.get(i).map(String::as_str);
        let lookup = |m: &Map<String, Value>, path: &[String]| -> Value {
            let mut cur = m
                .get(path.first().map(String::as_str).unwrap_or(""))
                .cloned()
                .unwrap_or(Value::Null);
            for s in path.iter().skip(1) {
                cur = match cur {
                    Value::Object(o) => o.get(s).cloned().unwrap_or(Value::Null),
                    Value::Array(a) => s
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| a.get(i).cloned())
                        .unwrap_or(Value::Null),
                    _ => Value::Null,
                };
            }
            cur
        };
        let side = match seg(1) {
            Some("auth") if p.segments.len() >= 3 => {
                if p.modifier.is_some() {
                    return Err(QueryError::Unsupported("modifiers on @request.auth".into()));
                }
                if p.segments.len() > 3 {
                    return Err(QueryError::Unsupported(
                        "relation paths from @request.auth".into(),
                    ));
                }
                match &self.req.auth {
                    Some(a) => json_value_to_stored(&lookup(a, &p.segments[2..])),
                    None => Side::Null,
                }
            }
            Some("body") if p.segments.len() >= 3 => {
                let name = &p.segments[2];
                let present = self.req.body.contains_key(name.as_str());
                match p.modifier {
                    Some(Modifier::Isset) => Side::Param(Stored::Int(i64::from(present))),
                    None => {
                        let v = lookup(&self.req.body, &p.segments[2..]);
                        match self.coll.field(name) {
                            Some(f) if p.segments.len() == 3 && f.kind != FieldType::Json => {
                                json_value_to_stored(&crate::schema::value::coerce(f, &v))
                            }
                            _ => json_value_to_stored(&v),
                        }
                    }
                    Some(m) => {
                        return Err(QueryError::Unsupported(format!("{m:?} on @request.body")));
                    }
                }
            }
            Some("query") if p.segments.len() == 3 => {
                json_value_to_stored(&lookup(&self.req.query, &p.segments[2..]))
            }
            Some("headers") if p.segments.len() == 3 => {
                json_value_to_stored(&lookup(&self.req.headers, &p.segments[2..]))
            }
            Some("method") if p.segments.len() == 2 => {
                Side::Param(Stored::Text(self.req.method.clone()))
            }
            Some("context") if p.segments.len() == 2 => {
                Side::Param(Stored::Text(self.req.context.clone()))
            }
            _ => {
                return Err(QueryError::Resolve(format!(
                    "unknown request field {:?}",
                    p.segments.join(".")
                )));
            }
        };
        Ok(side)
    }

    fn resolve(&mut self, o: &Operand) -> Result<Side, QueryError> {
        Ok(match o {
            Operand::Text(t) => Side::Param(Stored::Text(t.clone())),
            Operand::Number(n) => Side::Param(Stored::Real(*n)),
            Operand::Bool(b) => Side::Param(Stored::Int(i64::from(*b))),
            Operand::Null => Side::Null,
            Operand::Ident(p) => self.resolve_path(p)?,
            Operand::Call { name, .. } => {
                return Err(QueryError::Unsupported(format!("function {name}")));
            }
        })
    }

    fn sql_of(&mut self, s: Side) -> String {
        match s {
            Side::Sql(x) => x,
            Side::Param(v) => self.bind(v),
            Side::Null => "NULL".to_owned(),
        }
    }

    fn like_pattern(t: &str) -> String {
        if t.contains('%') {
            return t.to_owned();
        }
        let mut out = String::with_capacity(t.len() + 2);
        out.push('%');
        for ch in t.chars() {
            if matches!(ch, '\\' | '%' | '_') {
                out.push('\\');
            }
            out.push(ch);
        }
        out.push('%');
        out
    }

    fn compare(&mut self, left: &Operand, op: Op, right: &Operand) -> Result<String, QueryError> {
        let l = self.resolve(left)?;
        let r = self.resolve(right)?;
        // Without a join, PocketBase's any-of operators behave like the plain ones.
        let op = match op {
            Op::AnyEq => Op::Eq,
            Op::AnyNeq => Op::Neq,
            Op::AnyGt => Op::Gt,
            Op::AnyGte => Op::Gte,
            Op::AnyLt => Op::Lt,
            Op::AnyLte => Op::Lte,
            Op::AnyLike => Op::Like,
            Op::AnyNotLike => Op::NotLike,
            other => other,
        };
        Ok(match op {
            Op::Eq | Op::Neq => {
                let eq = op == Op::Eq;
                if r.is_empty_literal() || l.is_empty_literal() {
                    let other = if r.is_empty_literal() { l } else { r };
                    if matches!(other, Side::Null) || other.is_empty_literal() {
                        return Ok(if eq { "1 = 1" } else { "1 = 0" }.to_owned());
                    }
                    let x = self.sql_of(other);
                    if eq {
                        format!("({x} = '' OR {x} IS NULL)")
                    } else {
                        format!("({x} IS NOT '' AND {x} IS NOT NULL)")
                    }
                } else if matches!((&l, &r), (Side::Sql(_), Side::Sql(_))) {
                    let (a, b) = (self.sql_of(l), self.sql_of(r));
                    if eq {
                        format!("COALESCE({a}, '') = COALESCE({b}, '')")
                    } else {
                        format!("COALESCE({a}, '') IS NOT COALESCE({b}, '')")
                    }
                } else {
                    let (a, b) = (self.sql_of(l), self.sql_of(r));
                    if eq {
                        format!("{a} = {b}")
                    } else {
                        format!("{a} IS NOT {b}")
                    }
                }
            }
            Op::Gt | Op::Gte | Op::Lt | Op::Lte => {
                let sym = match op {
                    Op::Gt => ">",
                    Op::Gte => ">=",
                    Op::Lt => "<",
                    _ => "<=",
                };
                let (a, b) = (self.sql_of(l), self.sql_of(r));
                format!("{a} {sym} {b}")
            }
            Op::Like | Op::NotLike => {
                let not = if op == Op::NotLike { "NOT " } else { "" };
                let a = self.sql_of(l);
                let b = match r {
                    Side::Param(Stored::Text(t)) => self.bind(Stored::Text(Self::like_pattern(&t))),
                    Side::Param(v) => {
                        let t = match v {
                            Stored::Int(i) => i.to_string(),
                            Stored::Real(f) => crate::schema::value::number(f).to_string(),
                            _ => String::new(),
                        };
                        self.bind(Stored::Text(Self::like_pattern(&t)))
                    }
                    Side::Sql(x) => format!("('%' || {x} || '%')"),
                    Side::Null => "NULL".into(),
                };
                format!("{a} {not}LIKE {b} ESCAPE '\\'")
            }
            _ => unreachable!("any-of operators were mapped above"),
        })
    }

    fn expr(&mut self, e: &Expr) -> Result<String, QueryError> {
        Ok(match e {
            Expr::And(a, b) => format!("({} AND {})", self.expr(a)?, self.expr(b)?),
            Expr::Or(a, b) => format!("({} OR {})", self.expr(a)?, self.expr(b)?),
            Expr::Cmp { left, op, right } => self.compare(left, *op, right)?,
        })
    }
}

fn forbid_request_refs(text: &str) -> Result<(), QueryError> {
    if text.contains("@request.") {
        return Err(QueryError::Forbidden("@request."));
    }
    if text.contains("@collection.") {
        return Err(QueryError::Forbidden("@collection."));
    }
    Ok(())
}

/// Compile a client `filter` (`client` = true: hidden fields and `@request.*` are off limits for
/// non-superusers) or an API rule (`client` = false).
pub(crate) fn compile_filter(
    coll: &Collection,
    text: &str,
    req: &RequestInfo,
    client: bool,
) -> Result<Select, QueryError> {
    if client && !req.is_superuser {
        forbid_request_refs(text)?;
    }
    let Some(expr) = parse::parse_filter(text)? else {
        return Ok(Select::default());
    };
    let mut c = Compiler {
        coll,
        req,
        params: Vec::new(),
        client,
    };
    let where_sql = c.expr(&expr)?;
    Ok(Select {
        joins: String::new(),
        where_sql,
        order_sql: String::new(),
        params: c.params,
    })
}

/// Compile a `sort` parameter into an ORDER BY list.
pub(crate) fn compile_sort(
    coll: &Collection,
    text: &str,
    req: &RequestInfo,
) -> Result<String, QueryError> {
    if !req.is_superuser {
        forbid_request_refs(text)?;
    }
    let keys = parse::parse_sort(text)?;
    let mut out = Vec::new();
    let mut c = Compiler {
        coll,
        req,
        params: Vec::new(),
        client: true,
    };
    for k in keys {
        let dir = if k.desc { "DESC" } else { "ASC" };
        let first = k.path.segments.first().map(String::as_str).unwrap_or("");
        let sql = match first {
            "@random" if k.path.segments.len() == 1 => "RANDOM()".to_owned(),
            "@rowid" if k.path.segments.len() == 1 => format!("{}.`_rowid_`", qi(&coll.name)),
            _ => match c.resolve_path(&k.path)? {
                Side::Sql(s) => s,
                _ => return Err(QueryError::Resolve(format!("cannot sort by {first:?}"))),
            },
        };
        if first == "@random" {
            out.push(sql);
        } else {
            out.push(format!("{sql} {dir}"));
        }
    }
    if !c.params.is_empty() {
        return Err(QueryError::Resolve("sort keys must be fields".into()));
    }
    Ok(out.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schema;
    use crate::schema::define::build;
    use serde_json::json;

    fn posts() -> Collection {
        build(
            &json!({"name":"posts","fields":[{"name":"title","type":"text"},{"name":"views","type":"number"},
                {"name":"meta","type":"json"},{"name":"secret","type":"text","hidden":true},
                {"name":"tags","type":"select","values":["a","b"],"maxSelect":2}]}),
            None,
            &Schema::new(vec![]),
        )
        .unwrap()
    }

    fn guest() -> RequestInfo {
        RequestInfo::default()
    }

    #[test]
    fn comparisons_bind_every_value() {
        let s = compile_filter(
            &posts(),
            r#"title = "x" && views > 2 || title ~ "a_b""#,
            &guest(),
            true,
        )
        .unwrap();
        assert_eq!(
            s.where_sql,
            "((`posts`.`title` = ? AND `posts`.`views` > ?) OR `posts`.`title` LIKE ? ESCAPE '\\')"
        );
        assert_eq!(
            s.params,
            vec![
                Stored::Text("x".into()),
                Stored::Real(2.0),
                Stored::Text("%a\\_b%".into())
            ]
        );
    }

    #[test]
    fn empty_literals_match_null_and_empty() {
        let s = compile_filter(&posts(), r#"title = "" && title != null"#, &guest(), true).unwrap();
        assert_eq!(
            s.where_sql,
            "((`posts`.`title` = '' OR `posts`.`title` IS NULL) AND (`posts`.`title` IS NOT '' AND `posts`.`title` IS NOT NULL))"
        );
    }

    #[test]
    fn hidden_fields_and_request_refs_are_refused_to_clients() {
        assert!(compile_filter(&posts(), "secret = 'x'", &guest(), true).is_err());
        assert!(compile_filter(&posts(), "secret = 'x'", &guest(), false).is_ok());
        assert_eq!(
            compile_filter(&posts(), "@request.auth.id != ''", &guest(), true),
            Err(QueryError::Forbidden("@request."))
        );
    }

    #[test]
    fn auth_values_are_bound() {
        let mut req = guest();
        let mut a = Map::new();
        a.insert("id".into(), json!("abc"));
        req.auth = Some(a);
        let s = compile_filter(&posts(), "@request.auth.id = title", &req, false).unwrap();
        assert_eq!(s.where_sql, "? = `posts`.`title`");
        assert_eq!(s.params, vec![Stored::Text("abc".into())]);
        let g = compile_filter(&posts(), "@request.auth.id != ''", &guest(), false).unwrap();
        assert_eq!(g.where_sql, "1 = 0");
    }

    #[test]
    fn unknown_fields_and_unsupported_paths_fail() {
        assert!(matches!(
            compile_filter(&posts(), "nope = 1", &guest(), true),
            Err(QueryError::Resolve(_))
        ));
        assert!(compile_filter(&posts(), "title", &guest(), true).is_err());
    }

    #[test]
    fn date_macros_bind_stored_date_text_and_numbers() {
        let Some(Side::Param(Stored::Text(t))) = macro_value("@monthEnd") else {
            panic!()
        };
        assert!(t.ends_with(" 23:59:59.999Z"), "{t}");
        let Some(Side::Param(Stored::Text(t))) = macro_value("@yearStart") else {
            panic!()
        };
        assert!(t.ends_with("-01-01 00:00:00.000Z"), "{t}");
        assert!(matches!(
            macro_value("@weekday"),
            Some(Side::Param(Stored::Int(0..=6)))
        ));
        assert!(macro_value("@nope").is_none());
    }

    #[test]
    fn sort_keys_compile() {
        assert_eq!(
            compile_sort(&posts(), "-views,+title,@rowid", &guest()).unwrap(),
            "`posts`.`views` DESC, `posts`.`title` ASC, `posts`.`_rowid_` ASC"
        );
        assert!(compile_sort(&posts(), "nope", &guest()).is_err());
    }
}
