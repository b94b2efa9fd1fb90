//! Expressions, comparisons and function calls of the filter language: `&&`/`||`, PocketBase's
//! empty-value rules for `=`/`!=`, LIKE wrapping, and the "every value" `NOT EXISTS` checks of
//! plain operators over multi-value operands.

use super::parse::{Expr, Op, Operand};
use super::sql::{like_pattern, number_text};
use super::{Kind, MultiMatch, Query, QueryError, Res, Scope, qi, resolve_err};
use crate::schema::value::Stored;

impl<'a> Query<'a> {
    // --- expressions ------------------------------------------------------------------------

    pub(super) fn expr(&mut self, scope: &Scope, e: &Expr) -> Result<String, QueryError> {
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

    pub(super) fn operand(&mut self, scope: &Scope, o: &Operand) -> Result<Res, QueryError> {
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
        r.kind == Kind::Null
            || (r.kind != Kind::Enforced && r.params.len() == 1 && self.param_is_empty(r.params[0]))
    }

    fn known_non_empty(&self, r: &Res) -> bool {
        r.kind == Kind::Const
            || (!r.params.is_empty()
                && !matches!(r.kind, Kind::Null | Kind::Enforced)
                && !r.params.iter().any(|&i| self.param_is_empty(i)))
    }

    /// `=` / `!=` with PocketBase's treatment of empty values.
    pub(super) fn equal(&self, eq: bool, l: &Res, r: &Res) -> String {
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
                (Some(lm), Some(rm)) => Some(self.many_vs_many(lm, l, rm, r, op)),
                (Some(lm), None) => Some(self.many_vs_one(lm, l, op, r, false)),
                (None, Some(rm)) => Some(self.many_vs_one(rm, r, op, l, true)),
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

    /// The "every value" subquery of a multi-valued side against a single one. As in
    /// PocketBase, the multi side's value keeps that side's NULL treatment (json's `IS`, strftime's
    /// enforced fallback) and the single side is compared as a plain expression with its
    /// parameters: its own NULL treatment is dropped.
    fn many_vs_one(
        &mut self,
        mm: &MultiMatch,
        many: &Res,
        op: Op,
        other: &Res,
        inverse: bool,
    ) -> String {
        let alias = self.next_sub_alias("__sm");
        let mut value = multi_value(&alias, many);
        let mut other = Res {
            multi: None,
            after: None,
            no_coalesce: false,
            kind: if other.kind == Kind::Enforced {
                Kind::Expr
            } else {
                other.kind
            },
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
        left: &Res,
        rm: &MultiMatch,
        right: &Res,
        op: Op,
    ) -> String {
        let la = self.next_sub_alias("__ml");
        let ra = self.next_sub_alias("__mr");
        let l = multi_value(&la, left);
        let mut r = multi_value(&ra, right);
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
        // The result carries every argument's parameters, strftime's format included (PocketBase
        // binds it too): on the right of `~` they are all LIKE-wrapped, so a format without `%`
        // gets wrapped itself, and a format with one leaves the result unwrapped (`2019 !~
        // strftime('%Y', when)` is `2019 NOT LIKE strftime('%Y', when)`).
        res.params = resolved
            .iter()
            .flat_map(|r| r.params.iter().copied())
            .collect();
        if name == "strftime" {
            res.kind = Kind::Enforced;
        }
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
}

/// The value column of a multi-match subquery aliased `alias`, with the NULL treatment of the
/// multi-valued operand it stands for (json's `IS`, strftime's enforced fallback).
fn multi_value(alias: &str, many: &Res) -> Res {
    Res {
        no_coalesce: many.no_coalesce,
        kind: if many.kind == Kind::Enforced {
            Kind::Enforced
        } else {
            Kind::Expr
        },
        ..Res::expr(format!("{}.`multiMatchValue`", qi(alias)))
    }
}
