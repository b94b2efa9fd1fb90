//! Identifiers: field paths walked through relations, back-relations, `@collection` and json
//! fields, each hop joined into the statement and into the path's "every value" subquery, with
//! the joined collections' listRules for non-superusers.

use super::parse::{self, Modifier, Path};
use super::request::{macro_value, modifier_name};
use super::sql::{json_array_length, json_each, json_extract};
use super::{
    BackRelation, Kind, MAX_RELATION_DEPTH, MAX_RULE_NESTING, MultiMatch, Query, QueryError, Res,
    Scope, Walk, back_relation, qi, resolve_err,
};
use crate::schema::{Collection, FieldType};
use std::sync::Arc;

impl<'a> Query<'a> {
    pub(super) fn resolve_path(&mut self, scope: &Scope, p: &Path) -> Result<Res, QueryError> {
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
            let mm_alias = format!("__mm{alias}");
            let table = qi(&coll.name);
            self.twin_join(&mut walk, [alias, mm_alias], |_, _| (table.clone(), None))?;
            walk.coll = coll;
            walk.with_mm = true;
            walk.allow_hidden = true;
            return self.walk_props(scope, walk, &p.segments[2..], p.modifier);
        }
        if first.starts_with('@') {
            return resolve_err(format!("unknown identifier {first:?}"));
        }
        self.walk_props(scope, walk, &p.segments, p.modifier)
    }

    pub(super) fn walk(
        &self,
        scope: &Scope,
        coll: &Arc<Collection>,
        alias: &str,
        allow_hidden: bool,
    ) -> Walk {
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
    pub(super) fn walk_props(
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
                    let new_mm = format!("{}_{prop}", w.mm_alias);
                    let table = qi(&target.name);
                    if multiple {
                        // The ids as json_each rows first (their aliases follow two formulas),
                        // then the target joined on each of them.
                        w.with_mm = true;
                        let je = [
                            format!("__je_{}_{prop}", w.alias),
                            format!("{}_{prop}_je", w.mm_alias),
                        ];
                        self.twin_join(&mut w, je, |from, _| {
                            (json_each(&format!("{}.{}", qi(from), qi(prop))), None)
                        })?;
                        self.twin_join(&mut w, [new_alias.clone(), new_mm], |from, to| {
                            let on = format!("{}.`id` = {}.`value`", qi(to), qi(from));
                            (table.clone(), Some(on))
                        })?;
                    } else {
                        self.twin_join(&mut w, [new_alias.clone(), new_mm], |from, to| {
                            let on = format!("{}.`id` = {}.{}", qi(to), qi(from), qi(prop));
                            (table.clone(), Some(on))
                        })?;
                    }
                    if !w.allow_hidden {
                        self.join_list_rule(scope, &target, &new_alias)?;
                    }
                    w.coll = target;
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
        let new_mm = format!("{}_{prop}", w.mm_alias);
        let table = qi(&back.name);
        let bf_name = qi(&bf.name);
        self.twin_join(w, [new_alias.clone(), new_mm], |from, to| {
            let on = if rel_multi {
                let je = format!("__je_{to}");
                format!(
                    "{}.`id` IN (SELECT {}.`value` FROM {} {})",
                    qi(from),
                    qi(&je),
                    json_each(&format!("{}.{bf_name}", qi(to))),
                    qi(&je)
                )
            } else {
                format!("{}.{bf_name} = {}.`id`", qi(to), qi(from))
            };
            (table.clone(), Some(on))
        })?;
        if back_multi {
            w.with_mm = true;
        }
        if !w.allow_hidden {
            self.join_list_rule(scope, &back, &new_alias)?;
        }
        w.coll = back;
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
        let Some(expr) = parse::parse_rule(&rule)? else {
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

    pub(super) fn last_prop(
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
            let je = [
                format!("__je_{}_{}", w.alias, f.name),
                format!("__je_{}_{}", w.mm_alias, f.name),
            ];
            let name = qi(&f.name);
            self.twin_join(&mut w, je, |from, _| {
                (json_each(&format!("{}.{name}", qi(from))), None)
            })?;
            w.mm.value = format!("{}.`value`", qi(&w.mm_alias));
            return Ok(Res {
                multi: Some(Box::new(w.mm)),
                ..Res::expr(format!("{}.`value`", qi(&w.alias)))
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
}
