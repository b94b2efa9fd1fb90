//! Records as PocketBase's JSON: alphabetical keys, `collectionId`/`collectionName`, hidden
//! fields only for superusers, auth secrets never, `email` only where PocketBase shows it.

use crate::query::parse::{FieldSel, parse_fields};
use crate::schema::Collection;
use crate::schema::value::from_stored;
use crate::store::StoreRecord;
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// Who is looking.
#[derive(Debug, Clone, Default)]
pub(crate) struct Viewer {
    pub superuser: bool,
    pub caller_collection: String,
    pub caller_id: String,
    /// Auth responses always show the record's own email.
    pub owner_view: bool,
    /// Auth records whose email the caller sees because their collection's `manageRule` holds
    /// for them (ids are unique across auth collections, so ids alone name them).
    pub managed: Option<Arc<HashSet<String>>>,
}

/// Whether `viewer` may not see this auth record's email. Only auth records can hide their
/// email; base records skip the ownership work entirely.
fn hides_email(c: &Collection, row: &StoreRecord, viewer: &Viewer) -> bool {
    c.is_auth()
        && !(viewer.superuser
            || viewer.owner_view
            || (viewer.caller_collection == c.id && viewer.caller_id == c.stored_text(row, "id"))
            || viewer
                .managed
                .as_ref()
                .is_some_and(|m| m.contains(c.stored_text(row, "id")))
            || c.fields
                .iter()
                .position(|f| f.name == "emailVisibility")
                .is_some_and(|i| from_stored(&c.fields[i], row[i].clone()) == json!(true)))
}

/// Consumes the row: every value moves into the JSON instead of being copied.
pub(crate) fn record_json(c: &Collection, row: StoreRecord, viewer: &Viewer) -> Map<String, Value> {
    let hide_email = hides_email(c, &row, viewer);
    let mut pairs: Vec<(String, Value)> = Vec::with_capacity(c.fields.len() + 2);
    for (f, v) in c.fields.iter().zip(row) {
        let secret = c.is_auth() && (f.name == "password" || f.name == "tokenKey");
        if secret || (f.hidden && !viewer.superuser) || (hide_email && f.name == "email") {
            continue;
        }
        pairs.push((f.name.clone(), from_stored(f, v)));
    }
    pairs.push(("collectionId".into(), json!(c.id)));
    pairs.push(("collectionName".into(), json!(c.name)));
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.into_iter().collect()
}

/// One key of a record's JSON, in output order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    Field(usize),
    CollectionId,
    CollectionName,
}

/// The keys of `c`'s records in the order `record_json` emits them (alphabetical), worked out
/// once per response instead of once per row.
pub(crate) fn key_order(c: &Collection) -> Vec<Slot> {
    let mut keys: Vec<(&str, Slot)> = c
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name.as_str(), Slot::Field(i)))
        .collect();
    keys.push(("collectionId", Slot::CollectionId));
    keys.push(("collectionName", Slot::CollectionName));
    keys.sort_by(|a, b| a.0.cmp(b.0));
    keys.into_iter().map(|(_, s)| s).collect()
}

/// The same JSON as `record_json` (same keys, order and values), written straight into `out`
/// without building a map: the list path's encoder.
pub(crate) fn write_record(
    out: &mut Vec<u8>,
    c: &Collection,
    order: &[Slot],
    row: StoreRecord,
    viewer: &Viewer,
) {
    let hide_email = hides_email(c, &row, viewer);
    let mut values: Vec<Option<crate::schema::value::Stored>> = row.into_iter().map(Some).collect();
    out.push(b'{');
    let mut first = true;
    let mut key = |out: &mut Vec<u8>, name: &str| {
        if !first {
            out.push(b',');
        }
        first = false;
        // Field names are identifiers: no escaping needed, but stay correct if one ever is not.
        let _ = serde_json::to_writer(&mut *out, name);
        out.push(b':');
    };
    for slot in order {
        match *slot {
            Slot::Field(i) => {
                let f = &c.fields[i];
                let secret = c.is_auth() && (f.name == "password" || f.name == "tokenKey");
                if secret || (f.hidden && !viewer.superuser) || (hide_email && f.name == "email") {
                    continue;
                }
                key(out, &f.name);
                let v = values[i]
                    .take()
                    .unwrap_or(crate::schema::value::Stored::Null);
                write_field_value(out, &from_stored(f, v));
            }
            Slot::CollectionId => {
                key(out, "collectionId");
                let _ = serde_json::to_writer(&mut *out, &c.id);
            }
            Slot::CollectionName => {
                key(out, "collectionName");
                let _ = serde_json::to_writer(&mut *out, &c.name);
            }
        }
    }
    out.push(b'}');
}

/// One selected path and its excerpt options.
type Sel<'a> = (&'a [String], Option<(usize, bool)>);

/// Parsed `fields` parameter, ready to apply to many records.
pub(crate) struct FieldsFilter(Vec<FieldSel>);

impl FieldsFilter {
    pub(crate) fn parse(raw: Option<&str>) -> Result<Option<Self>, ()> {
        match raw {
            None => Ok(None),
            Some(s) if s.trim().is_empty() => Ok(None),
            Some(s) => {
                let mut sel = parse_fields(s).map_err(|_| ())?;
                // A path named twice keeps its last selection (PocketBase keys them in a map).
                let mut i = 0;
                while i < sel.len() {
                    if sel[i + 1..].iter().any(|later| later.path == sel[i].path) {
                        sel.remove(i);
                    } else {
                        i += 1;
                    }
                }
                if sel.is_empty() {
                    Ok(None)
                } else {
                    Ok(Some(Self(sel)))
                }
            }
        }
    }

    /// Keep only the selected keys of `m` (paths apply level by level; `*` keeps all keys).
    pub(crate) fn apply(&self, m: Map<String, Value>) -> Map<String, Value> {
        let sels: Vec<Sel<'_>> = self
            .0
            .iter()
            .map(|s| (s.path.as_slice(), s.excerpt))
            .collect();
        pick(m, &sels)
    }

    /// For auth responses the selection applies to `{record, token}` as a whole.
    pub(crate) fn apply_value(&self, v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(self.apply(m)),
            other => other,
        }
    }
}

fn pick(m: Map<String, Value>, sels: &[Sel<'_>]) -> Map<String, Value> {
    let mut out = Map::new();
    let star = sels.iter().find(|(p, _)| p.len() == 1 && p[0] == "*");
    for (k, v) in m {
        let direct: Vec<&Sel<'_>> = sels
            .iter()
            .filter(|(p, _)| p.len() == 1 && p[0] == k)
            .collect();
        let nested: Vec<Sel<'_>> = sels
            .iter()
            .filter(|(p, _)| p.len() > 1 && p[0] == k)
            .map(|(p, e)| (&p[1..], *e))
            .collect();
        if let Some((_, excerpt)) = direct.first().map(|d| **d) {
            out.insert(k, excerpt_of(v, excerpt));
        } else if !nested.is_empty() {
            let v = match v {
                Value::Object(o) => Value::Object(pick(o, &nested)),
                Value::Array(a) => Value::Array(
                    a.into_iter()
                        .map(|x| match x {
                            Value::Object(o) => Value::Object(pick(o, &nested)),
                            other => other,
                        })
                        .collect(),
                ),
                other => other,
            };
            out.insert(k, v);
        } else if let Some((_, excerpt)) = star {
            out.insert(k, excerpt_of(v, *excerpt));
        }
    }
    out
}

fn excerpt_of(v: Value, excerpt: Option<(usize, bool)>) -> Value {
    let Some((max, ellipsis)) = excerpt else {
        return v;
    };
    let Value::String(s) = v else { return v };
    let text = html_text(&s).trim().to_owned();
    if text.len() <= max || text.chars().count() <= max {
        return json!(text);
    }
    let mut cut: String = text.chars().take(max).collect::<String>().trim().to_owned();
    if ellipsis {
        cut.push_str("...");
    }
    json!(cut)
}

/// Elements whose content is no text.
const EXCLUDED_TAGS: &[&str] = &[
    "head", "style", "script", "iframe", "embed", "applet", "object", "svg", "img", "picture",
    "dialog", "template", "button", "form", "textarea", "input", "select", "option",
];
/// Elements that do not break the text (the others are blocks: a space around them).
const INLINE_TAGS: &[&str] = &[
    "a", "abbr", "acronym", "b", "bdo", "big", "br", "button", "cite", "code", "em", "i", "label",
    "q", "small", "span", "strong", "strike", "sub", "sup", "time",
];
/// Elements without content.
const VOID_TAGS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
];

/// The text of an HTML fragment as PocketBase's excerpt reads it: tags dropped (and the content
/// of non-text elements), whitespace runs made one space, a space around block elements,
/// character references decoded.
fn html_text(s: &str) -> String {
    let mut out = String::new();
    let mut prev_space = true; // the document itself is a block
    let mut skip: Option<String> = None;
    let push_text = |out: &mut String, prev_space: &mut bool, raw: &str| {
        let decoded = decode_entities(raw);
        let mut t = String::with_capacity(decoded.len());
        let mut in_ws = false;
        for c in decoded.chars() {
            // Go's `\s`: ASCII blanks only (a no-break space is text).
            if matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ') {
                if !in_ws {
                    t.push(' ');
                }
                in_ws = true;
            } else {
                t.push(c);
                in_ws = false;
            }
        }
        let t = if *prev_space {
            t.trim_start_matches(' ')
        } else {
            &t
        };
        if !t.is_empty() {
            *prev_space = t.ends_with(' ');
            out.push_str(t);
        }
    };
    let mut rest = s;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if skip.is_none() {
                push_text(&mut out, &mut prev_space, rest);
            }
            break;
        };
        if skip.is_none() {
            push_text(&mut out, &mut prev_space, &rest[..lt]);
        }
        let after = &rest[lt + 1..];
        let Some(gt) = after.find('>') else {
            if skip.is_none() {
                push_text(&mut out, &mut prev_space, &rest[lt..]);
            }
            break;
        };
        let tag = &after[..gt];
        rest = &after[gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        if let Some(open) = &skip {
            if closing && *open == name {
                skip = None;
            }
            continue;
        }
        if EXCLUDED_TAGS.contains(&name.as_str()) {
            if !closing && !VOID_TAGS.contains(&name.as_str()) && !tag.ends_with('/') {
                skip = Some(name);
            }
            continue;
        }
        if !INLINE_TAGS.contains(&name.as_str()) && !prev_space {
            out.push(' ');
            prev_space = true;
        }
    }
    out
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let end = tail.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| {
            let name = &tail[1..e];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                n if n.starts_with("#x") || n.starts_with("#X") => u32::from_str_radix(&n[2..], 16)
                    .ok()
                    .and_then(char::from_u32),
                n if n.starts_with('#') => n[1..].parse().ok().and_then(char::from_u32),
                _ => None,
            }?;
            Some((c, e + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &tail[len..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A field's value as Go's JSON encoder writes it (its numbers as Go spells a float64).
fn write_field_value(out: &mut Vec<u8>, v: &Value) {
    crate::schema::value::write_go_json(out, v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_direct_encoder_writes_what_record_json_builds() {
        use crate::schema::Schema;
        use crate::schema::define::build;
        use crate::schema::value::Stored;
        let c = build(
            &json!({"name": "people", "type": "auth", "fields": [
                {"name": "zeta", "type": "number"}, {"name": "alpha", "type": "json"},
                {"name": "tags", "type": "select", "values": ["a", "b"], "maxSelect": 2},
                {"name": "secret", "type": "text", "hidden": true}]}),
            None,
            &Schema::default(),
        )
        .unwrap();
        let row: StoreRecord = c
            .fields
            .iter()
            .map(|f| match f.name.as_str() {
                "id" => Stored::Text("abc123def456ghi".into()),
                "zeta" => Stored::Real(2.5),
                "alpha" => Stored::Text(r#"{"k":[1,"\u00e9"]}"#.into()),
                "tags" => Stored::Text(r#"["a","b"]"#.into()),
                "email" => Stored::Text("x@example.com".into()),
                "secret" => Stored::Text("s".into()),
                _ => Stored::Text(String::new()),
            })
            .collect();
        for viewer in [
            Viewer::default(),
            Viewer {
                superuser: true,
                ..Viewer::default()
            },
        ] {
            let expected = Value::Object(record_json(&c, row.clone(), &viewer));
            let mut out = Vec::new();
            write_record(&mut out, &c, &key_order(&c), row.clone(), &viewer);
            assert_eq!(out, crate::schema::value::go_json(&expected));
        }
    }

    #[test]
    fn fields_pick_keys_and_excerpts() {
        let f = FieldsFilter::parse(Some("id,body:excerpt(5,true)"))
            .unwrap()
            .unwrap();
        let mut m = Map::new();
        m.insert("id".into(), json!("a"));
        m.insert("body".into(), json!("<p>Hi <b>there</b></p>"));
        m.insert("title".into(), json!("t"));
        let out = f.apply(m);
        assert_eq!(Value::Object(out), json!({"id":"a","body":"Hi th..."}));
    }

    #[test]
    fn fields_with_one_trailing_dot_keep_the_whole_value() {
        let v = json!({"name":"n","expand":{"a":{"id":"x","body":"b"}},"other":1});
        let whole = FieldsFilter::parse(Some("name,expand.a.id,expand."))
            .unwrap()
            .unwrap();
        assert_eq!(
            whole.apply_value(v.clone()),
            json!({"name":"n","expand":{"a":{"id":"x","body":"b"}}})
        );
        // Two dots, or a star with a dot, select nothing below their key.
        let none = FieldsFilter::parse(Some("expand..,*.")).unwrap().unwrap();
        assert_eq!(none.apply_value(v), json!({"expand":{}}));
    }

    #[test]
    fn star_keeps_everything_and_nested_paths_narrow() {
        let f = FieldsFilter::parse(Some("*,record.id")).unwrap().unwrap();
        let v = json!({"token":"t","record":{"id":"x","email":"e"}});
        assert_eq!(f.apply_value(v), json!({"token":"t","record":{"id":"x"}}));
    }
}
