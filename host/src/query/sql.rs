//! The SQL helpers shared with PocketBase's storage conventions: reading json and multi-value
//! columns, number text and LIKE patterns as PocketBase writes them, unique-index detection.

/// Read a json column (or any column) as a JSON value; `path` is `""` or `.a[0].b` / `[1]`.
pub(super) fn json_extract(col: &str, path: &str) -> String {
    format!(
        "(CASE WHEN json_valid({col}) THEN JSON_EXTRACT({col}, '${path}') ELSE JSON_EXTRACT(json_object('pb', {col}), '$.pb{path}') END)"
    )
}

/// The items of a (possibly single-valued) multi field as json_each rows.
pub(super) fn json_each(col: &str) -> String {
    format!(
        "json_each(CASE WHEN iif(json_valid({col}), json_type({col})='array', FALSE) THEN {col} ELSE json_array({col}) END)"
    )
}

pub(super) fn json_array_length(col: &str) -> String {
    format!(
        "json_array_length(CASE WHEN iif(json_valid({col}), json_type({col})='array', FALSE) THEN {col} ELSE (CASE WHEN {col} = '' OR {col} IS NULL THEN json_array() ELSE json_array({col}) END) END)"
    )
}

/// Does `indexes` hold a UNIQUE index on exactly `column`?
pub(super) fn has_single_column_unique_index(indexes: &[String], column: &str) -> bool {
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
pub(super) fn number_text(n: f64) -> String {
    crate::schema::value::number(n).to_string()
}

/// PocketBase's LIKE pattern rule: a value with an unescaped `%` is used verbatim; otherwise its
/// unescaped `\`, `%` and `_` are escaped and it is wrapped in `%...%` ("contains").
pub(super) fn like_pattern(t: &str) -> String {
    if contains_unescaped(t, '%') {
        return t.to_owned();
    }
    format!("%{}%", escape_unescaped(t, &['\\', '%', '_']))
}

pub(super) fn contains_unescaped(s: &str, ch: char) -> bool {
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
