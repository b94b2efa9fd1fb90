//! `@request.*`: the caller's context, method, query, headers and body as bound parameters, the
//! auth record and submitted relations joined to their collections, `:each`, `:length` and
//! `:changed` over submitted values, and the date macros (`@now`, `@todayStart` ...).

use super::parse::{Modifier, Path};
use super::{Kind, Query, QueryError, Res, Scope, qi, resolve_err};
use crate::schema::FieldType;
use crate::schema::value::Stored;
use serde_json::Value;

impl<'a> Query<'a> {
    pub(super) fn resolve_request(&mut self, scope: &Scope, p: &Path) -> Result<Res, QueryError> {
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
            let mm_alias = format!("__mm_{alias}");
            let table = qi(&coll.name);
            let mut w = self.walk(scope, &coll, &scope.alias, true);
            self.twin_join(&mut w, [alias, mm_alias], |_, to| {
                (table.clone(), Some(format!("{}.`id` = {ph}", qi(to))))
            })?;
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
        let mm_alias = format!("__mm{alias}");
        let table = qi(&target.name);
        let mut w = self.walk(scope, &target, &scope.alias, true);
        self.twin_join(&mut w, [alias, mm_alias], |_, to| {
            let on = format!("{}.`id` IN (SELECT `value` FROM json_each({ph}))", qi(to));
            (table.clone(), Some(on))
        })?;
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
        let mm_alias = format!("__mm{alias}");
        let mut w = self.walk(scope, &scope.coll, &scope.alias, true);
        self.twin_join(&mut w, [alias, mm_alias], |_, _| {
            (format!("json_each({ph})"), None)
        })?;
        w.mm.value = format!("{}.`value`", qi(&w.mm_alias));
        Ok(Res {
            multi: Some(Box::new(w.mm)),
            ..Res::expr(format!("{}.`value`", qi(&w.alias)))
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

pub(super) fn modifier_name(m: Modifier) -> &'static str {
    match m {
        Modifier::Isset => "isset",
        Modifier::Changed => "changed",
        Modifier::Length => "length",
        Modifier::Each => "each",
        Modifier::Lower => "lower",
    }
}

pub(super) fn macro_value(name: &str) -> Option<Stored> {
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
