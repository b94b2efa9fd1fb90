//! View queries as PocketBase reads them, before SQLite does: one statement only, and the
//! select list and tables picked out by its own light parser (not SQL's grammar: `a || b AS c`
//! is "invalid identifier parts"), which suggest each column's field: `id` the primary key, a
//! `count(...)` or an integer cast a number, a direct column of a collection a clone of its field
//! (a collection's `id` a relation to it), anything else json. The store then asks SQLite for the
//! view's real columns and keeps the suggestions for the names it finds.

use super::index::tokens_with;
use super::{Collection, Field, Schema};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

static JOIN_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"(?im)\s+(full\s+outer\s+join|left\s+outer\s+join|right\s+outer\s+join|full\s+join|cross\s+join|inner\s+join|outer\s+join|left\s+join|right\s+join|join)\s+?").expect("static regex")
});
static DISCARD_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"(?im)\s+(where|group\s+by|having|order|limit|with)\s+?")
        .expect("static regex")
});
static COMMENTS_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"(?m)(/\*[\s\S]*?\*/)|(--.+$)").expect("static regex"));
static CAST_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"(?is)^cast\s*\(.*\s+as\s+(\w+)\s*\)$").expect("static regex")
});

/// The query as PocketBase keeps it: trimmed of blanks and `;`, and refused when it holds more
/// than one statement.
pub(crate) fn normalize(query: &str) -> Result<String, String> {
    let q = query.trim().trim_matches(';').to_owned();
    let parts = tokens_with(&q, &[';'], false).unwrap_or_default();
    if parts.len() > 1 {
        return Err("multiple statements are not supported".into());
    }
    Ok(q)
}

#[derive(Debug, Clone)]
struct Ident {
    original: String,
    alias: String,
}

fn trim_ident(raw: &str, extra: &str) -> String {
    let chars: Vec<char> = "`\"[];".chars().chain(extra.chars()).collect();
    raw.split('.')
        .map(|p| p.trim_matches(chars.as_slice()))
        .collect::<Vec<_>>()
        .join(".")
}

fn ident_from(parts: &[String]) -> Result<Ident, String> {
    let (original, alias) = match parts {
        [o, as_kw, a] => {
            if !as_kw.eq_ignore_ascii_case("as") {
                return Err(format!(
                    "invalid identifier part - expected \"as\", got {as_kw}"
                ));
            }
            (o.clone(), a.clone())
        }
        [o, a] => (o.clone(), a.clone()),
        [o] => (o.clone(), o.rsplit('.').next().unwrap_or(o).to_owned()),
        _ => return Err(format!("invalid identifier parts [{}]", parts.join(" "))),
    };
    Ok(Ident {
        original: trim_ident(&original, ""),
        alias: trim_ident(&alias, "'"),
    })
}

fn unbalanced(s: &str) -> String {
    format!("unbalanced parenthesis or quoted expression: {s:?}")
}

fn identifiers(expr: &str) -> Result<Vec<Ident>, String> {
    let raw = tokens_with(expr, &[','], false).ok_or_else(|| unbalanced(expr))?;
    raw.iter()
        .map(|r| {
            let parts = tokens_with(r, &[' ', '\n', '\t'], false).ok_or_else(|| unbalanced(r))?;
            ident_from(&parts)
        })
        .collect()
}

/// The select list and the tables (FROM and JOINs) of a query, as PocketBase's parser sees them.
fn parse(query: &str) -> Result<(Vec<Ident>, Vec<Ident>), String> {
    let s = query.trim().trim_matches(';');
    let s = COMMENTS_RE.replace_all(s, " ");
    let s = JOIN_RE.replace_all(&s, " __pb_join__ ");
    let s = DISCARD_RE.replace_all(&s, " __pb_discard__ ");
    let toks = tokens_with(&s, &[',', ' ', '\n', '\t'], true).ok_or_else(|| unbalanced(&s))?;
    let (mut select, mut from, mut join) = (String::new(), String::new(), String::new());
    let mut part = "";
    let mut skip = false;
    for token in toks {
        let trimmed = token.trim().to_lowercase();
        match trimmed.as_str() {
            "select" => {
                skip = false;
                part = "select";
            }
            "distinct" => {}
            "from" => {
                skip = false;
                part = "from";
            }
            "__pb_join__" => {
                skip = false;
                if part == "join" {
                    join.push(',');
                }
                part = "join";
            }
            "__pb_discard__" => skip = true,
            _ => {
                if part == "join" && trimmed == "on" {
                    skip = true;
                }
                let target = match part {
                    "select" => Some(&mut select),
                    "from" => Some(&mut from),
                    "join" => Some(&mut join),
                    _ => None,
                };
                if !skip && let Some(t) = target {
                    t.push(' ');
                    t.push_str(&token);
                }
            }
        }
    }
    let columns = identifiers(&select)?;
    let mut tables = identifiers(&from)?;
    tables.extend(identifiers(&join)?);
    Ok((columns, tables))
}

fn field(v: Value) -> Field {
    let Value::Object(m) = v else {
        unreachable!("field literals are objects")
    };
    super::define::field_from_json(m).expect("valid field literal")
}

/// The `id` column of a view.
pub(crate) fn id_field() -> Field {
    field(
        json!({"id": "text3208210256", "name": "id", "type": "text", "system": true,
        "required": true, "primaryKey": true, "pattern": "^[a-z0-9]+$"}),
    )
}

/// A column PocketBase knows nothing about: json (the `id` column aside).
pub(crate) fn default_field(name: &str) -> Field {
    if name == "id" {
        return id_field();
    }
    field(json!({"id": "", "name": name, "type": "json", "maxSize": 1}))
}

/// The fields PocketBase suggests for the query's columns, by column name (without ids for the
/// non-clones: the field list gives them theirs). `clone_id` makes a clone's random id.
pub(crate) fn suggest(
    schema: &Schema,
    query: &str,
    clone_id: &mut dyn FnMut() -> String,
) -> Result<HashMap<String, Field>, String> {
    let (columns, tables) = parse(query)?;
    // collections by table alias
    let mut by_alias: HashMap<String, &Collection> = HashMap::new();
    for t in &tables {
        if t.alias.contains('(') {
            continue;
        }
        if let Some(c) = schema.collections.iter().find(|c| c.name == t.original) {
            by_alias.insert(t.alias.clone(), c);
        }
    }
    let main = tables.first().map(|t| t.alias.clone()).unwrap_or_default();
    let mut out = HashMap::new();
    for col in columns {
        if col.alias == "*" {
            return Err("wildcard columns (*) are not supported - manually type the collection field names you want the view query to have".into());
        }
        let lower = col.original.to_lowercase();
        let alias = col.alias.clone();
        let simple = |kind: &str, only_int: bool| {
            let mut m = Map::new();
            m.insert("id".into(), json!(""));
            m.insert("name".into(), json!(alias));
            m.insert("type".into(), json!(kind));
            if only_int {
                m.insert("onlyInt".into(), json!(true));
            }
            field(Value::Object(m))
        };
        if col.alias == "id" {
            out.insert(alias.clone(), id_field());
            continue;
        }
        if lower.starts_with("count(") {
            out.insert(alias.clone(), simple("number", true));
            continue;
        }
        if lower.starts_with("total(") {
            out.insert(alias.clone(), simple("number", false));
            continue;
        }
        if let Some(cast) = CAST_RE.captures(&lower).and_then(|c| c.get(1)) {
            let f = match cast.as_str() {
                "real" | "decimal" | "numeric" => Some(simple("number", false)),
                "int" | "integer" => Some(simple("number", true)),
                "text" => Some(simple("text", false)),
                "boolean" | "bool" => Some(simple("bool", false)),
                _ => None,
            };
            if let Some(f) = f {
                out.insert(alias.clone(), f);
                continue;
            }
        }
        let parts: Vec<&str> = col.original.split('.').collect();
        let (field_name, coll) = if parts.len() == 2 {
            (parts[1], by_alias.get(parts[0]).copied())
        } else {
            (parts[0], by_alias.get(&main).copied())
        };
        let Some(coll) = coll else {
            out.insert(alias.clone(), default_field(&alias));
            continue;
        };
        let Some(source) = coll
            .fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(field_name))
        else {
            out.insert(alias.clone(), default_field(&alias));
            continue;
        };
        if field_name.eq_ignore_ascii_case("id") {
            out.insert(
                alias.clone(),
                field(
                    json!({"id": "", "name": alias, "type": "relation", "maxSelect": 1,
                    "collectionId": coll.id}),
                ),
            );
            continue;
        }
        let mut raw = source.raw.clone();
        raw.insert("id".into(), json!(clone_id()));
        raw.insert("name".into(), json!(alias));
        out.insert(alias, field(Value::Object(raw)));
    }
    Ok(out)
}

/// Where a view's file field takes its files from, as PocketBase finds it to serve them: the
/// first collection that is not a view, following the query's columns from view to view (at
/// most 5 levels), and that collection's field (by its own name).
pub(crate) fn file_source(
    schema: &Schema,
    view: &Collection,
    field: &str,
) -> Option<(Arc<Collection>, String)> {
    let (mut view, mut field) = (view.clone(), field.to_owned());
    for _ in 0..5 {
        let (columns, tables) = parse(view.view_query()).ok()?;
        let mut by_alias: HashMap<&str, &Arc<Collection>> = HashMap::new();
        for t in &tables {
            if let Some(c) = schema.collections.iter().find(|c| c.name == t.original) {
                by_alias.insert(t.alias.as_str(), c);
            }
        }
        let main = tables.first().map(|t| t.alias.as_str()).unwrap_or_default();
        let (coll, original) = columns.iter().find_map(|col| {
            if col.alias != field {
                return None;
            }
            let parts: Vec<&str> = col.original.split('.').collect();
            let (name, coll) = match parts.as_slice() {
                [alias, name] => (*name, by_alias.get(alias)?),
                _ => (col.original.as_str(), by_alias.get(main)?),
            };
            let f = coll
                .fields
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(name))?;
            Some((Arc::clone(coll), f.name.clone()))
        })?;
        if !coll.is_view() {
            return Some((coll, original));
        }
        (view, field) = ((*coll).clone(), original);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_as_pocketbase_reads_them() {
        assert!(normalize("SELECT 1; SELECT 2").is_err());
        assert_eq!(
            normalize(" SELECT id FROM t; ").unwrap(),
            "SELECT id FROM t"
        );
        let (cols, tables) = parse("SELECT a.id, b.x AS y, count(*) as n FROM posts a LEFT JOIN tags b ON a.t = b.id WHERE 1").unwrap();
        let cols: Vec<(String, String)> = cols.into_iter().map(|c| (c.original, c.alias)).collect();
        assert_eq!(
            cols,
            [
                ("a.id".to_owned(), "id".to_owned()),
                ("b.x".into(), "y".into()),
                ("count(*)".into(), "n".into())
            ]
        );
        assert_eq!(tables.len(), 2);
        assert_eq!(
            parse("SELECT id, title || '!' as t FROM x").unwrap_err(),
            "invalid identifier parts [title || '!' as t]"
        );
    }
}
