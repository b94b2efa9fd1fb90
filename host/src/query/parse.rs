//! Lexer and parser for PocketBase's filter language (the `?filter=` query
//! parameter and all API rules), plus the `?sort=` and `?fields=` parameters.
//!
//! The accepted syntax mirrors PocketBase 0.40 (fexpr) as observed against the
//! reference binary:
//!
//! * `expr := group (("&&" | "||") group)*`, `group := "(" expr ")" | operand op operand`;
//!   `&&` binds tighter than `||`.
//! * Operators: `= != > >= < <= ~ !~` and their "any" variants prefixed with `?`.
//! * Operands: identifiers (`title`, `author.name`, `@request.auth.id`,
//!   `@collection.posts:alias.title`, `tags:each`, ...), quoted text (`"..."` or
//!   `'...'`), numbers (`-?\d+(\.\d+)?`, no exponent) and function calls
//!   (`name(arg, ...)`, at most 3 levels of nested calls).
//! * Whitespace is space, tab and newline only (`\r` is rejected like PocketBase
//!   does); `// ...` comments run to the end of the line.
//! * Text escapes: `\\`, `\"`, `\'`, `\n`, `\r` and `\t` are resolved; a
//!   backslash followed by anything else is kept verbatim (`"\q"` is `\q`).
//! * `true`, `false` and `null` (ASCII case-insensitive) become literals.
//!
//! Parsing is linear in the input size, never panics and recursion is bounded
//! by [`FILTER_MAX_DEPTH`] (parentheses) and [`FUNC_MAX_DEPTH`] (calls).

use std::fmt;

/// Longer filters are rejected (PocketBase counts bytes).
pub(crate) const FILTER_MAX_LEN: usize = 3500;
/// Maximum parenthesis nesting of a filter.
pub(crate) const FILTER_MAX_DEPTH: usize = 64;
/// Maximum number of comparisons in one filter (PocketBase: "max filter
/// expressions limit reached").
pub(crate) const FILTER_MAX_EXPRS: usize = 200;
/// Maximum nesting of function calls (`f(g(h(x)))` is the deepest allowed).
pub(crate) const FUNC_MAX_DEPTH: usize = 3;
/// Maximum number of `sort` keys.
pub(crate) const SORT_MAX_KEYS: usize = 8;
/// Maximum length in bytes of one `sort` key.
pub(crate) const SORT_MAX_KEY_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp {
        left: Operand,
        op: Op,
        right: Operand,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Neq,
    Gt,
    Gte,
    Lt,
    Lte,
    Like,
    NotLike,
    AnyEq,
    AnyNeq,
    AnyGt,
    AnyGte,
    AnyLt,
    AnyLte,
    AnyLike,
    AnyNotLike,
}

impl Op {
    fn from_sign(s: &str) -> Option<Op> {
        Some(match s {
            "=" => Op::Eq,
            "!=" => Op::Neq,
            ">" => Op::Gt,
            ">=" => Op::Gte,
            "<" => Op::Lt,
            "<=" => Op::Lte,
            "~" => Op::Like,
            "!~" => Op::NotLike,
            "?=" => Op::AnyEq,
            "?!=" => Op::AnyNeq,
            "?>" => Op::AnyGt,
            "?>=" => Op::AnyGte,
            "?<" => Op::AnyLt,
            "?<=" => Op::AnyLte,
            "?~" => Op::AnyLike,
            "?!~" => Op::AnyNotLike,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    Text(String),
    Number(f64),
    Bool(bool),
    Null,
    Ident(Path),
    Call { name: String, args: Vec<Operand> },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Path {
    pub segments: Vec<String>,
    pub modifier: Option<Modifier>,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Modifier {
    Isset,
    Changed,
    Length,
    Each,
    Lower,
}

impl Modifier {
    fn from_name(s: &str) -> Option<Modifier> {
        Some(match s {
            "isset" => Modifier::Isset,
            "changed" => Modifier::Changed,
            "length" => Modifier::Length,
            "each" => Modifier::Each,
            "lower" => Modifier::Lower,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

// ---------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// Raw identifier text (validated into a [`Path`] by the parser).
    Ident(String),
    /// Function name immediately followed by `(` (the paren is consumed).
    Func(String),
    Text(String),
    Number(f64),
    Op(Op),
    And,
    Or,
    LParen,
    RParen,
    Comma,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'@' || b == b'#'
}

fn is_ident_body(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b':'
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Describes the character at byte `pos` for error messages.
fn char_at(input: &str, pos: usize) -> char {
    input[pos..].chars().next().unwrap_or('\u{FFFD}')
}

/// Tokenizes a whole filter; positions are byte offsets kept for messages.
fn tokenize(input: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let bytes = input.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        match b {
            b' ' | b'\t' | b'\n' => i += 1,
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                toks.push((start, Tok::LParen));
                i += 1;
            }
            b')' => {
                toks.push((start, Tok::RParen));
                i += 1;
            }
            b',' => {
                toks.push((start, Tok::Comma));
                i += 1;
            }
            b'"' | b'\'' => {
                let (text, next) = scan_text(input, i)?;
                toks.push((start, Tok::Text(text)));
                i = next;
            }
            b'-' | b'0'..=b'9' => {
                let (num, next) = scan_number(input, i)?;
                toks.push((start, Tok::Number(num)));
                i = next;
            }
            b'=' | b'!' | b'>' | b'<' | b'~' | b'?' => {
                while i < bytes.len() && matches!(bytes[i], b'=' | b'!' | b'>' | b'<' | b'~' | b'?')
                {
                    i += 1;
                }
                let sign = &input[start..i];
                match Op::from_sign(sign) {
                    Some(op) => toks.push((start, Tok::Op(op))),
                    None => return err(format!("invalid sign operator {sign:?} at {start}")),
                }
            }
            b'&' | b'|' => {
                while i < bytes.len() && matches!(bytes[i], b'&' | b'|') {
                    i += 1;
                }
                match &input[start..i] {
                    "&&" => toks.push((start, Tok::And)),
                    "||" => toks.push((start, Tok::Or)),
                    other => return err(format!("invalid join operator {other:?} at {start}")),
                }
            }
            _ if is_ident_start(b) => {
                i += 1;
                while i < bytes.len() && is_ident_body(bytes[i]) {
                    i += 1;
                }
                let raw = input[start..i].to_string();
                if bytes.get(i) == Some(&b'(') {
                    i += 1;
                    toks.push((start, Tok::Func(raw)));
                } else {
                    toks.push((start, Tok::Ident(raw)));
                }
            }
            _ => {
                return err(format!(
                    "unexpected character {:?} at {start}",
                    char_at(input, start)
                ));
            }
        }
    }
    Ok(toks)
}

/// Scans a quoted text starting at the opening quote; returns the unescaped
/// content and the byte index right after the closing quote.
fn scan_text(input: &str, start: usize) -> Result<(String, usize), ParseError> {
    let bytes = input.as_bytes();
    let quote = bytes[start];
    let mut out = String::new();
    let mut i = start + 1;
    // Start of the pending run of bytes to copy verbatim (always on a char
    // boundary because we only split at ASCII bytes).
    let mut run = i;
    while i < bytes.len() {
        let b = bytes[i];
        if b == quote {
            out.push_str(&input[run..i]);
            return Ok((out, i + 1));
        }
        if b == b'\\' {
            out.push_str(&input[run..i]);
            let Some(&next) = bytes.get(i + 1) else {
                break;
            };
            match next {
                b'\\' | b'"' | b'\'' => out.push(next as char),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                _ => {
                    // Unknown escape: keep the backslash, the next char is
                    // copied with the following run.
                    out.push('\\');
                    i += 1;
                    run = i;
                    continue;
                }
            }
            i += 2;
            run = i;
            continue;
        }
        i += 1;
    }
    err(format!("unterminated quoted text at {start}"))
}

/// Scans `-?\d+(\.\d+)?`.
fn scan_number(input: &str, start: usize) -> Result<(f64, usize), ParseError> {
    let bytes = input.as_bytes();
    let mut i = start;
    if bytes[i] == b'-' {
        i += 1;
    }
    let digits = |mut j: usize| {
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    let int_end = digits(i);
    if int_end == i {
        return err(format!("invalid number at {start}"));
    }
    i = int_end;
    if bytes.get(i) == Some(&b'.') {
        let frac_end = digits(i + 1);
        if frac_end == i + 1 {
            return err(format!("invalid number {:?}", &input[start..=i]));
        }
        i = frac_end;
    }
    let lit = &input[start..i];
    match lit.parse::<f64>() {
        Ok(n) if n.is_finite() => Ok((n, i)),
        _ => err(format!("invalid number {lit:?}")),
    }
}

// ---------------------------------------------------------------------------
// Identifiers
// ---------------------------------------------------------------------------

/// Validates a raw identifier (as produced by the lexer) into a [`Path`].
fn parse_path(raw: &str) -> Result<Path, ParseError> {
    let bytes = raw.as_bytes();
    if bytes.is_empty()
        || !is_ident_start(bytes[0])
        || !bytes[1..].iter().all(|&b| is_ident_body(b))
    {
        return err(format!("invalid identifier {raw:?}"));
    }
    if raw == "_" {
        return err(format!("invalid identifier {raw:?}"));
    }
    let parts: Vec<&str> = raw.split('.').collect();
    let last = parts.len() - 1;
    let is_collection = parts[0] == "@collection";
    let mut segments = Vec::with_capacity(parts.len());
    let mut modifier = None;
    let mut alias = None;
    for (idx, part) in parts.iter().enumerate() {
        let mut pieces = part.split(':');
        let name = pieces.next().unwrap_or("");
        let mut rest: Vec<&str> = pieces.collect();
        let name_ok = if idx == 0 {
            let body = name.strip_prefix(['@', '#']).unwrap_or(name);
            is_word(body)
        } else {
            is_word(name)
        };
        if !name_ok {
            return err(format!("invalid identifier {raw:?}"));
        }
        if idx == 1 && is_collection && !rest.is_empty() {
            let a = rest.remove(0);
            if !is_word(a) {
                return err(format!("invalid collection alias in {raw:?}"));
            }
            alias = Some(a.to_string());
        }
        if idx == last
            && let Some(m) = rest.pop()
        {
            match Modifier::from_name(m) {
                Some(m) => modifier = Some(m),
                None => return err(format!("unknown modifier {m:?} in {raw:?}")),
            }
        }
        if !rest.is_empty() {
            return err(format!("misplaced ':' in identifier {raw:?}"));
        }
        segments.push(name.to_string());
    }
    Ok(Path {
        segments,
        modifier,
        alias,
    })
}

/// Turns an identifier token into an operand (`true`/`false`/`null` become
/// literals, compared ASCII case-insensitively like PocketBase).
fn ident_operand(raw: &str) -> Result<Operand, ParseError> {
    if raw.eq_ignore_ascii_case("true") {
        return Ok(Operand::Bool(true));
    }
    if raw.eq_ignore_ascii_case("false") {
        return Ok(Operand::Bool(false));
    }
    if raw.eq_ignore_ascii_case("null") {
        return Ok(Operand::Null);
    }
    parse_path(raw).map(Operand::Ident)
}

// ---------------------------------------------------------------------------
// Filter parser
// ---------------------------------------------------------------------------

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    exprs: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn next(&mut self) -> Option<(usize, Tok)> {
        let t = self.toks.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn describe_next(&self) -> String {
        match self.toks.get(self.pos) {
            Some((at, t)) => format!("{t:?} at {at}"),
            None => "end of input".to_string(),
        }
    }

    /// `expr := and ("||" and)*`
    fn expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let mut left = self.and_expr(depth)?;
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            let right = self.and_expr(depth)?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// `and := group ("&&" group)*`
    fn and_expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let mut left = self.group(depth)?;
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            let right = self.group(depth)?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// `group := "(" expr ")" | operand op operand`
    fn group(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if self.peek() == Some(&Tok::LParen) {
            if depth >= FILTER_MAX_DEPTH {
                return err(format!(
                    "max parenthesis nesting ({FILTER_MAX_DEPTH}) reached"
                ));
            }
            self.pos += 1;
            if self.peek() == Some(&Tok::RParen) {
                return err("empty group expression");
            }
            let inner = self.expr(depth + 1)?;
            return match self.next() {
                Some((_, Tok::RParen)) => Ok(inner),
                _ => err("missing closing parenthesis"),
            };
        }
        let left = self.operand(0, "left operand")?;
        let op = match self.next() {
            Some((_, Tok::Op(op))) => op,
            Some((at, t)) => return err(format!("expected a sign operator, got {t:?} at {at}")),
            None => return err("expected a sign operator, got end of input"),
        };
        let right = self.operand(0, "right operand")?;
        self.exprs += 1;
        if self.exprs > FILTER_MAX_EXPRS {
            return err(format!(
                "max filter expressions limit ({FILTER_MAX_EXPRS}) reached"
            ));
        }
        Ok(Expr::Cmp { left, op, right })
    }

    /// An operand; `calls` is the number of enclosing function calls.
    fn operand(&mut self, calls: usize, what: &str) -> Result<Operand, ParseError> {
        let described = self.describe_next();
        match self.next() {
            Some((_, Tok::Ident(raw))) => ident_operand(&raw),
            Some((_, Tok::Text(s))) => Ok(Operand::Text(s)),
            Some((_, Tok::Number(n))) => Ok(Operand::Number(n)),
            Some((_, Tok::Func(name))) => self.call(name, calls + 1),
            _ => err(format!(
                "expected {what} (identifier, function, text or number), got {described}"
            )),
        }
    }

    /// Arguments of a call whose `name(` was already consumed.
    fn call(&mut self, name: String, level: usize) -> Result<Operand, ParseError> {
        if level > FUNC_MAX_DEPTH {
            return err(format!(
                "max nested function calls ({FUNC_MAX_DEPTH}) reached in {name:?}"
            ));
        }
        // The lexer guarantees the name does not start with a digit.
        if !is_word(&name) {
            return err(format!("invalid function name {name:?}"));
        }
        let mut args = Vec::new();
        loop {
            if self.peek() == Some(&Tok::RParen) {
                // `f()` and a trailing comma `f(a,)` are both accepted.
                self.pos += 1;
                return Ok(Operand::Call { name, args });
            }
            args.push(self.operand(level, "function argument")?);
            match self.next() {
                Some((_, Tok::Comma)) => {}
                Some((_, Tok::RParen)) => return Ok(Operand::Call { name, args }),
                _ => return err(format!("expected ',' or ')' in function {name:?}")),
            }
        }
    }
}

/// The text PocketBase's scanner effectively reads when `input` holds NUL bytes. Its reader
/// returns NUL as its end-of-input mark, so a NUL where a token starts ends the expression;
/// one that ends a run (spaces, a name, a number, an operator, a comment) is swallowed as
/// that run's lookahead and scanning goes on after it; one inside a quoted text or a group
/// cuts it short (unterminated).
fn as_pocketbase_scans(input: &str) -> std::borrow::Cow<'_, str> {
    if !input.contains('\0') {
        return std::borrow::Cow::Borrowed(input);
    }
    let b = input.as_bytes();
    let class = |c: u8| match c {
        b' ' | b'\t' | b'\n' | b'\r' => 1,
        b'=' | b'!' | b'>' | b'<' | b'~' | b'?' => 2,
        b'&' | b'|' => 3,
        _ if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'@' | b':' | b'-') => 4,
        _ => 0,
    };
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let (mut i, mut depth) = (0usize, 0usize);
    'scan: while i < b.len() {
        let c = b[i];
        if c == 0 {
            break; // at a token start (or inside a group): the end
        }
        match c {
            b'"' | b'\'' => {
                out.push(c);
                i += 1;
                while i < b.len() {
                    match b[i] {
                        0 => break 'scan,
                        b'\\' if i + 1 < b.len() && b[i + 1] != 0 => {
                            out.extend_from_slice(&b[i..i + 2]);
                            i += 2;
                            continue;
                        }
                        q if q == c => {
                            out.push(q);
                            i += 1;
                            continue 'scan;
                        }
                        other => out.push(other),
                    }
                    i += 1;
                }
            }
            b'(' | b')' => {
                depth = if c == b'(' {
                    depth + 1
                } else {
                    depth.saturating_sub(1)
                };
                out.push(c);
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' && b[i] != 0 {
                    out.push(b[i]);
                    i += 1;
                }
                i += usize::from(b.get(i) == Some(&0) && depth == 0);
            }
            _ if class(c) != 0 => {
                let k = class(c);
                while i < b.len() && class(b[i]) == k {
                    out.push(b[i]);
                    i += 1;
                }
                if b.get(i) == Some(&0) {
                    if depth > 0 {
                        break;
                    }
                    // The run's lookahead swallowed it, and the run ended there.
                    out.push(b' ');
                    i += 1;
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were split on, so `out` is still UTF-8.
    std::borrow::Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// Parses a filter or rule expression. Only the empty string means "no
/// filter"; like PocketBase, whitespace- or comment-only input is an error.
pub(crate) fn parse_filter(input: &str) -> Result<Option<Expr>, ParseError> {
    if input.len() > FILTER_MAX_LEN {
        return err(format!(
            "filter is too long ({} > {FILTER_MAX_LEN} bytes)",
            input.len()
        ));
    }
    parse_rule(input)
}

/// Parses an API rule: a filter without the client filter's length limit (PocketBase checks
/// the length of request filters only; a rule is the superuser's own text).
pub(crate) fn parse_rule(input: &str) -> Result<Option<Expr>, ParseError> {
    if input.is_empty() {
        return Ok(None);
    }
    let input = as_pocketbase_scans(input);
    let toks = tokenize(&input)?;
    if toks.is_empty() {
        return err("empty filter expression");
    }
    let mut p = Parser {
        toks,
        pos: 0,
        exprs: 0,
    };
    let expr = p.expr(0)?;
    if p.pos < p.toks.len() {
        return err(format!("expected && or ||, got {}", p.describe_next()));
    }
    Ok(Some(expr))
}

// ---------------------------------------------------------------------------
// sort
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SortKey {
    pub path: Path,
    pub desc: bool,
}

/// Parses `?sort=`: comma separated keys, each trimmed, optionally prefixed
/// by `-` (DESC) or `+` (ASC). Empty keys are errors; an empty string is no
/// sort at all.
pub(crate) fn parse_sort(input: &str) -> Result<Vec<SortKey>, ParseError> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut keys = Vec::new();
    for item in input.split(',') {
        let item = item.trim();
        if keys.len() >= SORT_MAX_KEYS {
            return err(format!("max sort expressions ({SORT_MAX_KEYS}) reached"));
        }
        if item.len() > SORT_MAX_KEY_LEN {
            return err(format!(
                "max sort field length ({SORT_MAX_KEY_LEN}) reached"
            ));
        }
        let (desc, name) = if let Some(rest) = item.strip_prefix('-') {
            (true, rest)
        } else if let Some(rest) = item.strip_prefix('+') {
            (false, rest)
        } else {
            (false, item)
        };
        let path =
            parse_path(name).map_err(|_| ParseError(format!("invalid sort field {name:?}")))?;
        keys.push(SortKey { path, desc });
    }
    Ok(keys)
}

// ---------------------------------------------------------------------------
// fields
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldSel {
    pub path: Vec<String>,
    pub excerpt: Option<(usize, bool)>,
}

/// Splits on commas that are outside parentheses and quotes.
fn split_top_level(input: &str) -> Result<Vec<&str>, ParseError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut start = 0;
    for (i, b) in input.bytes().enumerate() {
        match quote {
            Some(q) => {
                if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => {
                    out.push(&input[start..i]);
                    start = i + 1;
                }
                _ => {}
            },
        }
    }
    if depth != 0 || quote.is_some() {
        return err(format!(
            "unbalanced parenthesis or quoted expression: {input:?}"
        ));
    }
    out.push(&input[start..]);
    Ok(out)
}

/// Parses the `max` excerpt argument: an integer or a decimal (truncated),
/// optionally signed; must end up > 0.
fn excerpt_max(s: &str) -> Result<usize, ParseError> {
    let valid = {
        let body = s.strip_prefix(['+', '-']).unwrap_or(s);
        let mut parts = body.splitn(2, '.');
        let int = parts.next().unwrap_or("");
        let frac = parts.next();
        !int.is_empty()
            && int.bytes().all(|b| b.is_ascii_digit())
            && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    let n: f64 = if valid { s.parse().unwrap_or(0.0) } else { 0.0 };
    if !(1.0..1e18).contains(&n) {
        return err("excerpt max argument must be > 0");
    }
    // Truncation toward zero is intended (`excerpt(2.9)` == `excerpt(2)`).
    Ok(n as usize)
}

/// Parses `excerpt(max, withEllipsis?)` (the part after the `:`).
fn parse_excerpt(modifier: &str) -> Result<(usize, bool), ParseError> {
    let (name, args) = match modifier.find('(') {
        Some(open) => (modifier[..open].trim(), Some(&modifier[open + 1..])),
        None => (modifier.trim(), None),
    };
    if name.is_empty() {
        return err("invalid or empty modifier expression");
    }
    if name != "excerpt" {
        return err(format!("missing or invalid modifier {name:?}"));
    }
    let Some(args) = args else {
        return err("excerpt max argument is required");
    };
    // Text after the matching `)` is ignored, like PocketBase does.
    let close = args
        .find(')')
        .ok_or_else(|| ParseError("missing ')' in excerpt modifier".into()))?;
    let args: Vec<&str> = args[..close].split(',').map(str::trim).collect();
    match args.as_slice() {
        [max] => Ok((excerpt_max(max)?, false)),
        [max, ellipsis] => Ok((
            excerpt_max(max)?,
            crate::schema::value::go_parse_bool(ellipsis) == Some(true),
        )),
        _ => err("too many excerpt arguments - expected (max, withEllipsis?)"),
    }
}

/// Parses `?fields=`. PocketBase is lenient here: keys are arbitrary strings
/// split on `.` (unknown keys simply select nothing) and empty items are
/// skipped; only the `:excerpt(...)` modifier is validated.
pub(crate) fn parse_fields(input: &str) -> Result<Vec<FieldSel>, ParseError> {
    let mut out = Vec::new();
    for item in split_top_level(input)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (path, excerpt) = match item.split_once(':') {
            Some((path, modifier)) => (path, Some(parse_excerpt(modifier)?)),
            None => (item, None),
        };
        // PocketBase matches a key by comparing `path + "."` with `key + "."` and drops one `.`
        // from what remains, so a single trailing dot (`expand.`) selects the whole value like
        // `expand` does; `*.` is no star there, so it keeps its empty last segment.
        let path = match path.strip_suffix('.') {
            Some(head)
                if !head.is_empty()
                    && !head.ends_with('.')
                    && head.rsplit('.').next() != Some("*") =>
            {
                head
            }
            _ => path,
        };
        out.push(FieldSel {
            path: path.split('.').map(str::to_string).collect(),
            excerpt,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(segs: &[&str]) -> Path {
        Path {
            segments: segs.iter().map(|s| s.to_string()).collect(),
            modifier: None,
            alias: None,
        }
    }

    fn id(raw: &str) -> Operand {
        Operand::Ident(parse_path(raw).unwrap())
    }

    fn text(s: &str) -> Operand {
        Operand::Text(s.to_string())
    }

    fn cmp(left: Operand, op: Op, right: Operand) -> Expr {
        Expr::Cmp { left, op, right }
    }

    fn and(a: Expr, b: Expr) -> Expr {
        Expr::And(Box::new(a), Box::new(b))
    }

    fn or(a: Expr, b: Expr) -> Expr {
        Expr::Or(Box::new(a), Box::new(b))
    }

    fn ok(input: &str) -> Expr {
        match parse_filter(input) {
            Ok(Some(e)) => e,
            other => panic!("{input:?} should parse, got {other:?}"),
        }
    }

    fn bad(input: &str) {
        let r = parse_filter(input);
        assert!(r.is_err(), "{input:?} should fail, got {r:?}");
    }

    /// Parses `a <op> b` and returns the right operand.
    fn rhs(input: &str) -> Operand {
        match ok(input) {
            Expr::Cmp { right, .. } => right,
            e => panic!("not a comparison: {e:?}"),
        }
    }

    #[test]
    fn simple_comparison() {
        assert_eq!(ok("title = \"x\""), cmp(id("title"), Op::Eq, text("x")));
        assert_eq!(
            ok("views>1"),
            cmp(id("views"), Op::Gt, Operand::Number(1.0))
        );
        assert_eq!(
            ok("\"Hello\" = title"),
            cmp(text("Hello"), Op::Eq, id("title"))
        );
        assert_eq!(
            ok("1 = 1"),
            cmp(Operand::Number(1.0), Op::Eq, Operand::Number(1.0))
        );
    }

    #[test]
    fn all_operators() {
        let cases = [
            ("=", Op::Eq),
            ("!=", Op::Neq),
            (">", Op::Gt),
            (">=", Op::Gte),
            ("<", Op::Lt),
            ("<=", Op::Lte),
            ("~", Op::Like),
            ("!~", Op::NotLike),
            ("?=", Op::AnyEq),
            ("?!=", Op::AnyNeq),
            ("?>", Op::AnyGt),
            ("?>=", Op::AnyGte),
            ("?<", Op::AnyLt),
            ("?<=", Op::AnyLte),
            ("?~", Op::AnyLike),
            ("?!~", Op::AnyNotLike),
        ];
        for (sign, op) in cases {
            for f in [format!("a {sign} 1"), format!("a{sign}1")] {
                assert_eq!(ok(&f), cmp(id("a"), op, Operand::Number(1.0)), "{f}");
            }
            // `-` is not a sign character, so `a>=-1` works.
            assert_eq!(
                ok(&format!("a{sign}-1")),
                cmp(id("a"), op, Operand::Number(-1.0))
            );
        }
        for bad_sign in [
            "==", "=!", "!", "?", "??", "!==", "=>", ">==", "<>", "=~", "~=", "?!", "!!=",
        ] {
            bad(&format!("a {bad_sign} 1"));
        }
    }

    #[test]
    fn precedence_and_associativity() {
        let a = || cmp(id("a"), Op::Eq, Operand::Number(1.0));
        let b = || cmp(id("b"), Op::Eq, Operand::Number(2.0));
        let c = || cmp(id("c"), Op::Eq, Operand::Number(3.0));
        assert_eq!(ok("a=1 || b=2 && c=3"), or(a(), and(b(), c())));
        assert_eq!(ok("a=1 && b=2 || c=3"), or(and(a(), b()), c()));
        assert_eq!(ok("a=1 && b=2 && c=3"), and(and(a(), b()), c()));
        assert_eq!(ok("a=1 || b=2 || c=3"), or(or(a(), b()), c()));
        assert_eq!(ok("(a=1 || b=2) && c=3"), and(or(a(), b()), c()));
        assert_eq!(ok("a=1 && (b=2 || c=3)"), and(a(), or(b(), c())));
        assert_eq!(ok("((a=1))"), a());
        assert_eq!(ok("a=1&&((b=2)||(c=3))"), and(a(), or(b(), c())));
    }

    #[test]
    fn whitespace_and_comments() {
        let expected = cmp(id("title"), Op::Eq, text("Hello World"));
        assert_eq!(ok("\n\t title\n=\t\"Hello World\"  \n"), expected);
        assert_eq!(
            ok("// comment\ntitle = \"Hello World\" // trailing"),
            expected
        );
        assert_eq!(ok("title // c\n= \"Hello World\""), expected);
        assert_eq!(
            ok("f(1, // c\n 2) = 1"),
            cmp(
                Operand::Call {
                    name: "f".into(),
                    args: vec![Operand::Number(1.0), Operand::Number(2.0)]
                },
                Op::Eq,
                Operand::Number(1.0)
            )
        );
        // Comment markers inside text are text.
        assert_eq!(rhs("a = \"// no\""), text("// no"));
        bad("a = 1 / 2");
        bad("a = 1\r");
        bad("a\r= 1");
        bad("#comment\na = 1");
    }

    #[test]
    fn empty_inputs() {
        assert_eq!(parse_filter(""), Ok(None));
        // PocketBase answers 400 "empty filter expression" for these.
        bad(" ");
        bad("\n\t");
        bad("// only a comment");
        bad("()");
        bad("(a=1) && ()");
        bad("(())");
    }

    #[test]
    fn literals() {
        assert_eq!(rhs("a = 12"), Operand::Number(12.0));
        assert_eq!(rhs("a = -3.5"), Operand::Number(-3.5));
        assert_eq!(rhs("a = 01"), Operand::Number(1.0));
        assert_eq!(rhs("a = -0"), Operand::Number(-0.0));
        assert_eq!(rhs("a = 42.50"), Operand::Number(42.5));
        assert_eq!(rhs("a = true"), Operand::Bool(true));
        assert_eq!(rhs("a = false"), Operand::Bool(false));
        assert_eq!(rhs("a = TRUE"), Operand::Bool(true));
        assert_eq!(rhs("a = False"), Operand::Bool(false));
        assert_eq!(rhs("a = null"), Operand::Null);
        assert_eq!(rhs("a = NULL"), Operand::Null);
        assert_eq!(rhs("a = 'single'"), text("single"));
        assert_eq!(rhs("a = \"\""), text(""));
        assert_eq!(rhs("a = ''"), text(""));
        // Not literals.
        assert_eq!(rhs("a = nulls"), id("nulls"));
        assert_eq!(rhs("a = true.x"), Operand::Ident(p(&["true", "x"])));
        // No exponent, no leading dot, no trailing dot, no plus.
        bad("a = 1.5e3");
        bad("a = 1e3");
        bad("a = .5");
        bad("a = 1.");
        bad("a = -.5");
        bad("a = 1.2.3");
        bad("a = +1");
        bad("a = -");
        bad("a = - 1");
        bad("a = --1");
        bad("a = 1x");
        bad(&format!("a = {}", "9".repeat(400)));
    }

    #[test]
    fn text_escapes() {
        assert_eq!(rhs(r#"a = "He said \"hi\"""#), text("He said \"hi\""));
        assert_eq!(rhs(r#"a = 'it\'s'"#), text("it's"));
        assert_eq!(rhs(r#"a = 'x\"y'"#), text("x\"y"));
        assert_eq!(rhs(r#"a = "x\'y""#), text("x'y"));
        assert_eq!(rhs(r#"a = 'x"y'"#), text("x\"y"));
        assert_eq!(rhs(r#"a = "x'y""#), text("x'y"));
        assert_eq!(rhs(r#"a = "a\\b""#), text("a\\b"));
        assert_eq!(rhs(r#"a = "a\\""#), text("a\\"));
        assert_eq!(rhs(r#"a = "a\\\\\\""#), text("a\\\\\\"));
        assert_eq!(rhs(r#"a = "\n\r\t""#), text("\n\r\t"));
        // Unknown escapes keep the backslash.
        assert_eq!(
            rhs(r#"a = "\q\x41\u00e9\0\%""#),
            text("\\q\\x41\\u00e9\\0\\%")
        );
        assert_eq!(rhs(r#"a = "\é""#), text("\\é"));
        // Raw control characters and newlines are kept.
        assert_eq!(rhs("a = \"x\ny\tz\""), text("x\ny\tz"));
        bad(r#"a = "\""#);
        bad(r#"a = "abc"#);
        bad("a = 'abc");
        bad(r#"a = "abc\"#);
        bad(r#"a = "ab"c""#);
    }

    #[test]
    fn unicode_text() {
        assert_eq!(
            rhs("a = \"héllo wörld ✓ 日本語 🎉\""),
            text("héllo wörld ✓ 日本語 🎉")
        );
        assert_eq!(rhs("a ~ '%ü%'"), text("%ü%"));
        // Non-ASCII letters are not identifier characters.
        bad("títle = 1");
        bad("a = é");
        bad("a = 1 && ü = 2");
    }

    #[test]
    fn identifiers() {
        assert_eq!(id("author.name"), Operand::Ident(p(&["author", "name"])));
        assert_eq!(
            id("@request.auth.id"),
            Operand::Ident(p(&["@request", "auth", "id"]))
        );
        assert_eq!(
            id("@collection.posts.title"),
            Operand::Ident(p(&["@collection", "posts", "title"]))
        );
        assert_eq!(id("@now"), Operand::Ident(p(&["@now"])));
        assert_eq!(id("_a1"), Operand::Ident(p(&["_a1"])));
        assert_eq!(id("__"), Operand::Ident(p(&["__"])));
        assert_eq!(
            id("meta.k.2.x"),
            Operand::Ident(p(&["meta", "k", "2", "x"]))
        );
        assert_eq!(
            id("comments_via_post.author.name"),
            Operand::Ident(p(&["comments_via_post", "author", "name"]))
        );
        // `#` is a valid identifier start for the lexer (resolution fails later).
        assert_eq!(id("#x"), Operand::Ident(p(&["#x"])));
        for raw in [
            "@", "_", "#", "title.", "title:", ".title", "title..x", "a.@b", "a.#b",
        ] {
            assert!(parse_path(raw).is_err(), "{raw}");
        }
        for f in [
            "@ = 1",
            "_ = 1",
            "# = 1",
            "title. = 1",
            "title: = 1",
            ".title = 1",
            ":title = 1",
            "title..x = 1",
            "vi#ews = 1",
            "vi@ews = 1",
            "1title = 1",
            "title-x = 1",
            "title$ = 1",
            "title\"x\" = 1",
            "@@a = 1",
        ] {
            bad(f);
        }
    }

    #[test]
    fn modifiers_and_aliases() {
        let with = |segs: &[&str], m: Option<Modifier>, a: Option<&str>| {
            Operand::Ident(Path {
                segments: segs.iter().map(|s| s.to_string()).collect(),
                modifier: m,
                alias: a.map(str::to_string),
            })
        };
        assert_eq!(
            id("@request.body.title:isset"),
            with(&["@request", "body", "title"], Some(Modifier::Isset), None)
        );
        assert_eq!(
            id("@request.body.title:changed"),
            with(
                &["@request", "body", "title"],
                Some(Modifier::Changed),
                None
            )
        );
        assert_eq!(
            id("tags:length"),
            with(&["tags"], Some(Modifier::Length), None)
        );
        assert_eq!(id("tags:each"), with(&["tags"], Some(Modifier::Each), None));
        assert_eq!(
            id("title:lower"),
            with(&["title"], Some(Modifier::Lower), None)
        );
        assert_eq!(
            id("@collection.posts:p.title"),
            with(&["@collection", "posts", "title"], None, Some("p"))
        );
        assert_eq!(
            id("@collection.posts:p.tags:each"),
            with(
                &["@collection", "posts", "tags"],
                Some(Modifier::Each),
                Some("p")
            )
        );
        assert_eq!(
            ok("@collection.comments:c.post ?= id"),
            cmp(
                with(&["@collection", "comments", "post"], None, Some("c")),
                Op::AnyEq,
                id("id")
            )
        );
        for raw in [
            "title:LOWER",
            "title:foo",
            "title:lower:lower",
            "title::lower",
            "title:lower.x",
            "a:1",
            "a.b:p.c",
            "@collection.posts:p:q.title",
            "@collection.posts:.title",
            "@collection:x.posts.title",
            "title:excerpt",
        ] {
            assert!(parse_path(raw).is_err(), "{raw}");
            bad(&format!("{raw} = 1"));
        }
    }

    #[test]
    fn function_calls() {
        let call = |name: &str, args: Vec<Operand>| Operand::Call {
            name: name.to_string(),
            args,
        };
        assert_eq!(
            ok("geoDistance(location.lon, location.lat, 23.3, -42.7) < 10"),
            cmp(
                call(
                    "geoDistance",
                    vec![
                        id("location.lon"),
                        id("location.lat"),
                        Operand::Number(23.3),
                        Operand::Number(-42.7)
                    ]
                ),
                Op::Lt,
                Operand::Number(10.0)
            )
        );
        assert_eq!(
            ok("strftime('%Y', created) = \"2026\""),
            cmp(
                call("strftime", vec![text("%Y"), id("created")]),
                Op::Eq,
                text("2026")
            )
        );
        // Up to three levels of nesting, any argument kind, on either side.
        assert_eq!(
            rhs("x = f(g(h(1), 'a', null), true)"),
            call(
                "f",
                vec![
                    call(
                        "g",
                        vec![
                            call("h", vec![Operand::Number(1.0)]),
                            text("a"),
                            Operand::Null
                        ]
                    ),
                    Operand::Bool(true)
                ]
            )
        );
        assert_eq!(rhs("x = f()"), call("f", vec![]));
        // PocketBase accepts a trailing comma.
        assert_eq!(rhs("x = f(1,)"), call("f", vec![Operand::Number(1.0)]));
        assert_eq!(
            rhs("x = f( 1 ,\n 2 )"),
            call("f", vec![Operand::Number(1.0), Operand::Number(2.0)])
        );
        bad("x = f(g(h(i(1))))");
        bad("x = f(,1)");
        bad("x = f(1 2)");
        bad("x = f(1,,2)");
        bad("x = f((1))");
        bad("x = f(1");
        bad("x = f(");
        bad("x = f (1)");
        bad("x = f(a = 1)");
        bad("x = f(1 && 2)");
        bad("x = a.b(1)");
        bad("x = @f(1)");
        bad("x = f:lower(1)");
        bad("f(1)");
        bad("a = 1, b = 2");
        bad("(a = 1, b = 2)");
    }

    #[test]
    fn malformed() {
        for f in [
            "a",
            "published",
            "\"a\"",
            "f(1)",
            "a =",
            "a = ",
            "= b",
            "=",
            "a == b",
            "a = 1 &&",
            "a = 1 ||",
            "&& a = 1",
            "|| a = 1",
            "a = 1 && || b = 2",
            "a = 1 & b = 2",
            "a = 1 | b = 2",
            "a = 1 &&& b = 2",
            "a = 1 ||| b = 2",
            "a = 1 b = 2",
            "a = 1 && b",
            "a = b = c",
            "a = (1)",
            "(a = 1",
            "a = 1)",
            "(a = 1))",
            "((a = 1)",
            ")(",
            "(()",
            "(a=1)b=2",
            "a=1(b=2)",
            "a=1 (b=2)",
            "(a=1)(b=2)",
            "a = 1 &&",
            "a = 1 && ()",
            "a = \"x",
            "a = 'x\"",
            "a > > 1",
            "a = 1 = 2",
            "a = 1;",
            "a = 1 && b = 2 ) && (c = 3",
            "a = [1]",
            "a = {1}",
            "a = $1",
            "a = `x`",
            "a = 1 // comment\n &&",
        ] {
            bad(f);
        }
    }

    #[test]
    fn parenthesised_text_is_not_a_group() {
        assert_eq!(ok("(title=\"(\")"), cmp(id("title"), Op::Eq, text("(")));
        assert_eq!(ok("(title=')')"), cmp(id("title"), Op::Eq, text(")")));
    }

    #[test]
    fn depth_limit() {
        let nested = |n: usize| format!("{}a=1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse_filter(&nested(FILTER_MAX_DEPTH)).is_ok());
        bad(&nested(FILTER_MAX_DEPTH + 1));
        bad(&nested(1000));
        // Way beyond the length limit too: must not overflow the stack.
        assert!(parse_filter(&"(".repeat(10_000)).is_err());
        assert!(parse_filter(&nested(10_000)).is_err());
        // The depth guard holds even without the length guard.
        let deep = nested(10_000);
        let mut parser = Parser {
            toks: tokenize(&deep).unwrap(),
            pos: 0,
            exprs: 0,
        };
        assert!(parser.expr(0).is_err());
        // Deep but unbalanced input within the length limit.
        bad(&"(".repeat(3000));
        bad(&")".repeat(3000));
    }

    #[test]
    fn length_and_expression_limits() {
        let pad = |n: usize| format!("a = \"{}\"", "x".repeat(n - 6));
        assert_eq!(pad(FILTER_MAX_LEN).len(), FILTER_MAX_LEN);
        assert!(parse_filter(&pad(FILTER_MAX_LEN)).is_ok());
        bad(&pad(FILTER_MAX_LEN + 1));
        // The limit is in bytes, like PocketBase.
        let multi = format!("a = \"{}\"", "é".repeat(1747));
        assert_eq!(multi.len(), 3500);
        assert!(parse_filter(&multi).is_ok());
        bad(&format!("a = \"{}\"", "é".repeat(1748)));
        // 1 MB input fails fast.
        bad(&"a = 1 && ".repeat(120_000));
        bad(&"x".repeat(1 << 20));

        let many = |n: usize| vec!["a=1"; n].join("&&");
        assert!(parse_filter(&many(FILTER_MAX_EXPRS)).is_ok());
        bad(&many(FILTER_MAX_EXPRS + 1));
    }

    /// Tiny deterministic LCG (Numerical Recipes constants).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
    }

    #[test]
    fn random_soup_never_panics() {
        let mut alphabet: Vec<&str> = "a b _ @ # . : ( ) , \" ' \\ = ! < > ~ ? & | && || - 1 0 \
             .5 // é 🎉 true null f( $ * + / [ 3 lower each :lower excerpt( @request. \
             @collection. x=1"
            .split(' ')
            .collect();
        alphabet.extend([" ", "\n", "\t", "\r", "\0"]);
        let mut rng = Lcg(0x5eed);
        let mut accepted = 0;
        for _ in 0..20_000 {
            let len = (rng.next() % 40) as usize;
            let mut s = String::new();
            for _ in 0..len {
                s.push_str(alphabet[rng.next() as usize % alphabet.len()]);
            }
            if let Ok(Some(_)) = parse_filter(&s) {
                accepted += 1;
            }
            let _ = parse_sort(&s);
            let _ = parse_fields(&s);
        }
        // Random bytes, lossily made UTF-8.
        for _ in 0..5_000 {
            let len = (rng.next() % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let s = String::from_utf8_lossy(&bytes);
            let _ = parse_filter(&s);
            let _ = parse_sort(&s);
            let _ = parse_fields(&s);
        }
        // Mutations of valid filters.
        let seeds = [
            "a = 1 && (b != 'x' || c ?~ \"y\")",
            "geoDistance(a.lon, a.lat, 1.5, -2) < 10 // c",
            "@collection.posts:p.tags:each ?= @request.auth.id",
        ];
        for _ in 0..10_000 {
            let seed = seeds[rng.next() as usize % seeds.len()];
            let mut bytes = seed.as_bytes().to_vec();
            for _ in 0..(1 + rng.next() % 3) {
                let pos = rng.next() as usize % bytes.len();
                match rng.next() % 3 {
                    0 => {
                        bytes.remove(pos);
                    }
                    1 => bytes.insert(pos, b"()\"'&|=!?:.,-\\ "[rng.next() as usize % 15]),
                    _ => {
                        let other = rng.next() as usize % bytes.len();
                        bytes.swap(pos, other);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let s = String::from_utf8_lossy(&bytes);
            let _ = parse_filter(&s);
        }
        assert!(
            accepted > 0,
            "the generator should produce some valid filters"
        );
    }

    #[test]
    fn sort_parsing() {
        let key = |raw: &str, desc: bool| SortKey {
            path: parse_path(raw).unwrap(),
            desc,
        };
        assert_eq!(parse_sort(""), Ok(vec![]));
        assert_eq!(
            parse_sort("-views,title"),
            Ok(vec![key("views", true), key("title", false)])
        );
        assert_eq!(
            parse_sort(" +title , -created "),
            Ok(vec![key("title", false), key("created", true)])
        );
        assert_eq!(
            parse_sort("@random,-@rowid"),
            Ok(vec![key("@random", false), key("@rowid", true)])
        );
        assert_eq!(parse_sort("-@random").unwrap()[0].path, p(&["@random"]));
        assert_eq!(
            parse_sort("author.name,-comments_via_post.created,title:lower,tags:length"),
            Ok(vec![
                key("author.name", false),
                key("comments_via_post.created", true),
                key("title:lower", false),
                key("tags:length", false),
            ])
        );
        assert_eq!(
            parse_sort("@collection.posts:p.title").unwrap()[0]
                .path
                .alias,
            Some("p".to_string())
        );
        // `true` is a plain field name here.
        assert_eq!(parse_sort("true"), Ok(vec![key("true", false)]));
        let eight = ["id"; SORT_MAX_KEYS].join(",");
        assert_eq!(parse_sort(&eight).unwrap().len(), SORT_MAX_KEYS);
        for bad_sort in [
            " ",
            ",",
            "views,",
            ",views",
            "views,,title",
            "--views",
            "+-views",
            "-+views",
            "+ views",
            "- views",
            "-",
            "+",
            "views desc",
            "\"title\"",
            "title.",
            "title:foo",
            "title:excerpt(1)",
            "f(x)",
            "_",
            "a-b",
            "títle",
        ] {
            assert!(parse_sort(bad_sort).is_err(), "{bad_sort:?}");
        }
        assert!(parse_sort(&format!("{eight},id")).is_err());
        assert!(parse_sort(&"a".repeat(SORT_MAX_KEY_LEN)).is_ok());
        assert!(parse_sort(&"a".repeat(SORT_MAX_KEY_LEN + 1)).is_err());
        assert!(parse_sort(&"a,".repeat(1 << 19)).is_err());
    }

    #[test]
    fn fields_parsing() {
        let sel = |path: &[&str], excerpt: Option<(usize, bool)>| FieldSel {
            path: path.iter().map(|s| s.to_string()).collect(),
            excerpt,
        };
        assert_eq!(parse_fields(""), Ok(vec![]));
        assert_eq!(parse_fields(" , ,"), Ok(vec![]));
        assert_eq!(
            parse_fields("id,title,expand.author.name,body:excerpt(5,true)"),
            Ok(vec![
                sel(&["id"], None),
                sel(&["title"], None),
                sel(&["expand", "author", "name"], None),
                sel(&["body"], Some((5, true))),
            ])
        );
        assert_eq!(
            parse_fields("*,expand.author.*"),
            Ok(vec![
                sel(&["*"], None),
                sel(&["expand", "author", "*"], None)
            ])
        );
        assert_eq!(
            parse_fields(" title , views ,,"),
            Ok(vec![sel(&["title"], None), sel(&["views"], None)])
        );
        assert_eq!(
            parse_fields("body:excerpt(200,true),title:excerpt(3)"),
            Ok(vec![
                sel(&["body"], Some((200, true))),
                sel(&["title"], Some((3, false)))
            ])
        );
        let one = |s: &str| parse_fields(s).map(|v| v[0].excerpt);
        assert_eq!(one("t:excerpt( 2 , true )"), Ok(Some((2, true))));
        assert_eq!(one("t:excerpt(2,1)"), Ok(Some((2, true))));
        assert_eq!(one("t:excerpt(2,T)"), Ok(Some((2, true))));
        assert_eq!(one("t:excerpt(2,TRUE)"), Ok(Some((2, true))));
        assert_eq!(one("t:excerpt(2,false)"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(2,yes)"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(2,)"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(+2)"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(2.9)"), Ok(Some((2, false))));
        assert_eq!(one("t: excerpt (2)"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(2)x"), Ok(Some((2, false))));
        assert_eq!(one("t:excerpt(2))"), Ok(Some((2, false))));
        assert_eq!(
            parse_fields("a:excerpt(2,(3)),b"),
            Ok(vec![sel(&["a"], Some((2, false))), sel(&["b"], None)])
        );
        // Quotes protect commas; keys are otherwise taken verbatim.
        assert_eq!(
            parse_fields("\"a,b\",title"),
            Ok(vec![sel(&["\"a,b\""], None), sel(&["title"], None)])
        );
        assert_eq!(
            parse_fields("títle.é"),
            Ok(vec![sel(&["títle", "é"], None)])
        );
        // One trailing dot selects the key whole (PocketBase trims one dot from what remains);
        // two leave an empty step that selects nothing, and `*.` is no star.
        assert_eq!(parse_fields("title."), Ok(vec![sel(&["title"], None)]));
        assert_eq!(
            parse_fields("title.."),
            Ok(vec![sel(&["title", "", ""], None)])
        );
        assert_eq!(parse_fields("a.*."), Ok(vec![sel(&["a", "*", ""], None)]));
        for bad_fields in [
            "t:excerpt(a)",
            "t:excerpt(-1)",
            "t:excerpt(0)",
            "t:excerpt(0.5)",
            "t:excerpt()",
            "t:excerpt()x",
            "t:excerpt(\"2\")",
            "t:excerpt(1e1)",
            "t:excerpt(99999999999999999999)",
            "t:excerpt(2,true,3)",
            "t:excerpt",
            "t:excerpt(2",
            "t:EXCERPT(2)",
            "t:foo",
            "t:",
            "a:b:excerpt(2)",
            "a,(b",
            "a,'b",
            "a\"",
        ] {
            assert!(parse_fields(bad_fields).is_err(), "{bad_fields:?}");
        }
    }
}
