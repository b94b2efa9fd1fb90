//! Index definitions as PocketBase reads them: a `CREATE [UNIQUE] INDEX` text parsed into its
//! parts (name, table, columns, `WHERE`), and written back in PocketBase's normalised form, which
//! is what is stored and what runs (so whatever else the text held never reaches SQLite).

use std::sync::LazyLock;

/// One column (or expression) of an index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexColumn {
    pub name: String,
    pub collate: String,
    pub sort: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Index {
    pub schema_name: String,
    pub index_name: String,
    pub table_name: String,
    pub where_clause: String,
    pub columns: Vec<IndexColumn>,
    pub unique: bool,
    pub optional: bool,
    /// A column that is only quotes or blanks (`(a, ``)`): PocketBase 0.40.6 refuses the whole
    /// index for it (an empty item, `(a,)`, is merely skipped).
    pub blank_column: bool,
}

// The statement must end with its column list or its WHERE clause; text before `CREATE` is
// ignored (both as PocketBase 0.40 does).
static INDEX_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"(?im)create\s+(unique\s+)?\s*index\s*(if\s+not\s+exists\s+)?(\S*)\s+on\s+(\S*)\s*\(([\s\S]*)\)(?:\s*where\s+([\s\S]*))?\s*\z",
    )
    .expect("static regex")
});

static COLUMN_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"(?im)^([\s\S]+?)(?:\s+collate\s+([\w]+))?(?:\s+(asc|desc))?$")
        .expect("static regex")
});

/// What surrounding quotes and blanks are stripped from names.
const TRIM: &[char] = &[
    '`', '"', '\'', '[', ']', '\r', '\n', '\t', '\x0c', '\x0b', ' ',
];

/// The blanks PocketBase's tokenizer trims from each token (those that are not separators).
const BLANKS: &[char] = &['\t', '\n', '\x0b', '\x0c', '\r', ' ', '\u{85}', '\u{a0}'];

/// PocketBase's tokenizer: split on `seps` outside parentheses and quotes (a backslash escapes
/// the next character), blanks that are not separators trimmed from each token, empty tokens
/// dropped, the separator kept at the end of its token when `keep`; None when a parenthesis or
/// quote is left open. A NUL ends the input, as it does there.
pub(crate) fn tokens_with(s: &str, seps: &[char], keep: bool) -> Option<Vec<String>> {
    let trim: Vec<char> = BLANKS
        .iter()
        .copied()
        .filter(|c| !seps.contains(c))
        .collect();
    let mut out = Vec::new();
    let mut buf = String::new();
    let (mut depth, mut quote, mut prev) = (0usize, None::<char>, '\0');
    let flush = |buf: &mut String, out: &mut Vec<String>| {
        let t = buf.trim_matches(trim.as_slice()).to_owned();
        if !t.is_empty() {
            out.push(t);
        }
        buf.clear();
    };
    for ch in s.chars() {
        if ch == '\0' {
            break;
        }
        if prev != '\\' {
            if ch == '(' && quote.is_none() {
                depth += 1;
            } else if ch == ')' && depth > 0 && quote.is_none() {
                depth -= 1;
            } else if matches!(ch, '\'' | '"' | '`') {
                match quote {
                    Some(q) if q == ch => quote = None,
                    None => quote = Some(ch),
                    Some(_) => {}
                }
            }
        }
        if seps.contains(&ch) && depth == 0 && quote.is_none() {
            if keep {
                buf.push(ch);
            }
            flush(&mut buf, &mut out);
            prev = ch;
            continue;
        }
        prev = ch;
        buf.push(ch);
    }
    if depth > 0 || quote.is_some() {
        return None;
    }
    flush(&mut buf, &mut out);
    Some(out)
}

fn tokens(s: &str, sep: char) -> Option<Vec<String>> {
    tokens_with(s, &[sep], false)
}

impl Index {
    /// Parse an index definition; an unparseable one gives an invalid (empty) index.
    pub(crate) fn parse(expr: &str) -> Index {
        let mut out = Index::default();
        let Some(m) = INDEX_RE.captures(expr) else {
            return out;
        };
        let group = |i: usize| m.get(i).map_or("", |g| g.as_str());
        out.unique = !group(1).trim().is_empty();
        out.optional = !group(2).trim().is_empty();
        let name_parts = tokens(group(3), '.').unwrap_or_default();
        if name_parts.len() == 2 {
            out.schema_name = name_parts[0].trim_matches(TRIM).to_owned();
            out.index_name = name_parts[1].trim_matches(TRIM).to_owned();
        } else if let Some(n) = name_parts.first() {
            out.index_name = n.trim_matches(TRIM).to_owned();
        }
        out.table_name = group(4).trim_matches(TRIM).to_owned();
        for col in tokens(group(5), ',').unwrap_or_default() {
            let Some(c) = COLUMN_RE.captures(&col) else {
                continue;
            };
            let name = c
                .get(1)
                .map_or("", |g| g.as_str())
                .trim_matches(TRIM)
                .to_owned();
            if name.is_empty() {
                out.blank_column = true;
                continue;
            }
            out.columns.push(IndexColumn {
                name,
                collate: c.get(2).map_or("", |g| g.as_str()).trim().to_owned(),
                sort: c.get(3).map_or("", |g| g.as_str()).to_uppercase(),
            });
        }
        out.where_clause = group(6).trim().to_owned();
        out
    }

    pub(crate) fn is_valid(&self) -> bool {
        !self.index_name.is_empty()
            && !self.table_name.is_empty()
            && !self.columns.is_empty()
            && !self.blank_column
    }

    /// The normalised statement ("" for an invalid index).
    pub(crate) fn build(&self) -> String {
        if !self.is_valid() {
            return String::new();
        }
        let mut s = String::from("CREATE ");
        if self.unique {
            s.push_str("UNIQUE ");
        }
        s.push_str("INDEX ");
        if self.optional {
            s.push_str("IF NOT EXISTS ");
        }
        if !self.schema_name.is_empty() {
            s.push_str(&format!("`{}`.", self.schema_name));
        }
        s.push_str(&format!("`{}` ON `{}` (", self.index_name, self.table_name));
        let many = self.columns.len() > 1;
        if many {
            s.push_str("\n  ");
        }
        let mut any = false;
        for col in &self.columns {
            let name = col.name.trim();
            if name.is_empty() {
                continue;
            }
            if any {
                s.push_str(",\n  ");
            }
            if col.name.contains('(') || col.name.contains(' ') {
                s.push_str(name);
            } else {
                s.push_str(&format!("`{name}`"));
            }
            if !col.collate.is_empty() {
                s.push_str(" COLLATE ");
                s.push_str(&col.collate);
            }
            if !col.sort.is_empty() {
                s.push(' ');
                s.push_str(&col.sort.to_uppercase());
            }
            any = true;
        }
        if any && many {
            s.push('\n');
        }
        s.push(')');
        if !self.where_clause.is_empty() {
            s.push_str(" WHERE ");
            s.push_str(&self.where_clause);
        }
        s
    }

    /// A single-column UNIQUE index on `column` (case-insensitive) among `indexes`.
    pub(crate) fn find_unique<'a>(indexes: &'a [String], column: &str) -> Option<&'a String> {
        indexes.iter().find(|i| {
            let p = Index::parse(i);
            p.unique && p.columns.len() == 1 && p.columns[0].name.eq_ignore_ascii_case(column)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_parse_and_normalise_as_pocketbase_does() {
        let cases: &[(&str, &str)] = &[
            (
                "create index idx_1 on t (id)",
                "CREATE INDEX `idx_1` ON `t` (`id`)",
            ),
            (
                "  CREATE UNIQUE INDEX IF NOT EXISTS `a`.`b` ON \"t\" (x COLLATE nocase desc, lower(y)) WHERE x != ''  ",
                "CREATE UNIQUE INDEX IF NOT EXISTS `a`.`b` ON `t` (\n  `x` COLLATE nocase DESC,\n  lower(y)\n) WHERE x != ''",
            ),
            (
                "xx create index i on t (id)\t",
                "CREATE INDEX `i` ON `t` (`id`)",
            ),
            ("create index i on t (id) x", ""),
            ("create index i on t (id);", ""),
            ("create index i on t ((id)", ""),
            ("create index on t (id)", ""),
            ("create index i on t ()", ""),
            ("DROP TABLE users", ""),
            ("create index i on t (`a`, ``)", ""),
            ("create index i on t (``, a)", ""),
            ("create index i on t (a, \"\")", ""),
            ("create index i on t (`a`, ` `)", ""),
            (
                "create index i on t (`a`,)",
                "CREATE INDEX `i` ON `t` (`a`)",
            ),
            (
                "create index i on t (id))",
                "CREATE INDEX `i` ON `t` (`id)`)",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(Index::parse(raw).build(), *want, "{raw}");
        }
    }
}
