//! Dates as PocketBase reads them: its own storage layout first, then the list of layouts of
//! Go's `cast` library in its order, each with the rules of Go's `time.Parse` (fixed-width
//! numbers, a fraction allowed after the seconds, a day that must exist in its month, the whole
//! input consumed). Layouts without a zone are UTC; a named zone counts as UTC.

use chrono::{DateTime, NaiveDate, Utc};

/// PocketBase's storage layout, tried before the others.
const DEFAULT_LAYOUT: &str = "2006-01-02 15:04:05.000Z";

/// `cast`'s layouts, in the order it tries them.
const CAST_LAYOUTS: &[&str] = &[
    "2006-01-02",
    "2006-01-02T15:04:05Z07:00",
    "2006-01-02T15:04:05",
    "Mon, 02 Jan 2006 15:04:05 -0700",
    "Mon, 02 Jan 2006 15:04:05 MST",
    "02 Jan 06 15:04 -0700",
    "02 Jan 06 15:04 MST",
    "Monday, 02-Jan-06 15:04:05 MST",
    "2006-01-02 15:04:05.999999999 -0700 MST",
    "2006-01-02T15:04:05-0700",
    "2006-01-02 15:04:05Z0700",
    "2006-01-02 15:04:05",
    "Mon Jan _2 15:04:05 2006",
    "Mon Jan _2 15:04:05 MST 2006",
    "Mon Jan 02 15:04:05 -0700 2006",
    "2006-01-02 15:04:05Z07:00",
    "02 Jan 2006",
    "2006-01-02 15:04:05 -07:00",
    "2006-01-02 15:04:05 -0700",
    "3:04PM",
    "Jan _2 15:04:05",
    "Jan _2 15:04:05.000",
    "Jan _2 15:04:05.000000",
    "Jan _2 15:04:05.000000000",
];

/// The layout's elements, longest names first where one is a prefix of another.
const ELEMENTS: &[&str] = &[
    "January", "Jan", "Monday", "Mon", "MST", "2006", "06", "01", "_2", "02", "15", "3", "04",
    "05", "PM", "Z07:00", "Z0700", "-07:00", "-0700",
];

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

#[derive(Default)]
struct Parts {
    year: i32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    nanos: u32,
    pm: Option<bool>,
    offset_secs: i32,
}

/// `n` digits exactly (or 1..=n when not `fixed`).
fn digits(v: &mut &str, n: usize, fixed: bool) -> Option<u32> {
    let b = v.as_bytes();
    let len = b.iter().take(n).take_while(|c| c.is_ascii_digit()).count();
    if len == 0 || (fixed && len < n) {
        return None;
    }
    let out = v[..len].parse().ok()?;
    *v = &v[len..];
    Some(out)
}

/// A fraction's digits (after its `.` or `,`) as nanoseconds.
fn fraction(v: &mut &str) -> u32 {
    let len = v.bytes().take_while(u8::is_ascii_digit).count();
    let mut nanos = 0u32;
    for (i, c) in v.bytes().take(len).enumerate() {
        if i < 9 {
            nanos = nanos * 10 + u32::from(c - b'0');
        }
    }
    for _ in len.min(9)..9 {
        nanos *= 10;
    }
    *v = &v[len..];
    nanos
}

fn prefix_ci<'a>(v: &'a str, word: &str) -> Option<&'a str> {
    let head = v.get(..word.len())?;
    head.eq_ignore_ascii_case(word).then(|| &v[word.len()..])
}

/// A numeric zone (`±hh:mm` or `±hhmm`), or `Z` when `z` allows it.
fn zone(v: &mut &str, colon: bool, z: bool) -> Option<i32> {
    if z && v.starts_with('Z') {
        *v = &v[1..];
        return Some(0);
    }
    let sign = match v.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    *v = &v[1..];
    let h = digits(v, 2, true)?;
    if colon {
        *v = v.strip_prefix(':')?;
    }
    let m = digits(v, 2, true)?;
    Some(sign * (h as i32 * 3600 + m as i32 * 60))
}

/// A zone abbreviation as Go's parser accepts one (its offset is taken as zero).
fn zone_name(v: &mut &str) -> Option<()> {
    if let Some(rest) = v.strip_prefix("UTC") {
        *v = rest;
        return Some(());
    }
    if let Some(rest) = v.strip_prefix("GMT") {
        // GMT may carry a signed hour offset, which Go applies.
        *v = rest;
        return Some(());
    }
    let upper = v.bytes().take_while(u8::is_ascii_uppercase).count();
    let ok = match upper {
        3 => true,
        4 | 5 => v.as_bytes()[upper - 1] == b'T',
        _ => false,
    };
    if !ok {
        return None;
    }
    *v = &v[upper..];
    Some(())
}

fn parse_layout(layout: &str, value: &str) -> Option<DateTime<Utc>> {
    let mut p = Parts {
        month: 1,
        day: 1,
        ..Parts::default()
    };
    let mut l = layout;
    let mut v = value;
    while !l.is_empty() {
        // a fractional-seconds element: `.000` (exact) or `.999` (optional)
        if (l.starts_with(".0") || l.starts_with(".9")) && l[1..].bytes().next().is_some() {
            let digit = l.as_bytes()[1];
            let n = l[1..].bytes().take_while(|&c| c == digit).count();
            l = &l[1 + n..];
            if digit == b'0' {
                v = v.strip_prefix('.')?;
                if v.bytes().take_while(u8::is_ascii_digit).count() != n {
                    return None;
                }
                p.nanos = fraction(&mut v);
            } else if let Some(rest) = v.strip_prefix('.') {
                if !rest.starts_with(|c: char| c.is_ascii_digit()) {
                    return None;
                }
                v = rest;
                p.nanos = fraction(&mut v);
            }
            continue;
        }
        let Some(el) = ELEMENTS.iter().find(|e| l.starts_with(**e)) else {
            let c = l.chars().next()?;
            v = v.strip_prefix(c)?;
            l = &l[c.len_utf8()..];
            continue;
        };
        l = &l[el.len()..];
        match *el {
            "2006" => p.year = digits(&mut v, 4, true)? as i32,
            "06" => {
                let y = digits(&mut v, 2, true)? as i32;
                p.year = if y >= 69 { 1900 + y } else { 2000 + y };
            }
            "01" => p.month = digits(&mut v, 2, true)?,
            "January" | "Jan" => {
                let i = MONTHS.iter().position(|m| {
                    let name = if *el == "Jan" { &m[..3] } else { m };
                    prefix_ci(v, name).is_some()
                })?;
                let name = if *el == "Jan" {
                    &MONTHS[i][..3]
                } else {
                    MONTHS[i]
                };
                v = &v[name.len()..];
                p.month = i as u32 + 1;
            }
            "Monday" | "Mon" => {
                let d = DAYS.iter().find(|d| {
                    let name = if *el == "Mon" { &d[..3] } else { d };
                    prefix_ci(v, name).is_some()
                })?;
                v = &v[if *el == "Mon" { 3 } else { d.len() }..];
            }
            "02" => p.day = digits(&mut v, 2, true)?,
            "_2" => {
                if v.starts_with(' ') {
                    v = &v[1..];
                }
                p.day = digits(&mut v, 2, false)?;
            }
            "15" => p.hour = digits(&mut v, 2, false)?,
            "3" => p.hour = digits(&mut v, 2, false)?,
            "04" => p.minute = digits(&mut v, 2, true)?,
            "05" => {
                p.second = digits(&mut v, 2, true)?;
                // A fraction may follow the seconds even when the layout has none there.
                let next_is_frac = l.starts_with(".0") || l.starts_with(".9");
                if !next_is_frac
                    && (v.starts_with('.') || v.starts_with(','))
                    && v[1..].starts_with(|c: char| c.is_ascii_digit())
                {
                    v = &v[1..];
                    p.nanos = fraction(&mut v);
                }
            }
            "PM" => {
                let head = v.get(..2)?;
                p.pm = match head {
                    "AM" => Some(false),
                    "PM" => Some(true),
                    _ => return None,
                };
                v = &v[2..];
            }
            "MST" => zone_name(&mut v)?,
            "Z07:00" => p.offset_secs = zone(&mut v, true, true)?,
            "Z0700" => p.offset_secs = zone(&mut v, false, true)?,
            "-07:00" => p.offset_secs = zone(&mut v, true, false)?,
            "-0700" => p.offset_secs = zone(&mut v, false, false)?,
            _ => return None,
        }
    }
    if !v.is_empty() {
        return None;
    }
    if let Some(pm) = p.pm {
        if p.hour > 12 {
            return None;
        }
        if pm && p.hour < 12 {
            p.hour += 12;
        } else if !pm && p.hour == 12 {
            p.hour = 0;
        }
    }
    if p.hour > 23 || p.minute > 59 || p.second > 59 {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(p.year, p.month, p.day)?;
    let t = date.and_hms_nano_opt(p.hour, p.minute, p.second, p.nanos)?;
    Some(t.and_utc() - chrono::Duration::seconds(i64::from(p.offset_secs)))
}

/// A date in PocketBase's storage form, or "" when no layout reads it (or it is Go's zero time,
/// 0001-01-01 00:00:00 UTC).
pub(crate) fn parse(s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    let found = std::iter::once(DEFAULT_LAYOUT)
        .chain(CAST_LAYOUTS.iter().copied())
        .find_map(|l| parse_layout(l, s));
    match found {
        Some(t) if t != go_zero() => format(t),
        _ => String::new(),
    }
}

fn go_zero() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .unwrap_or_default()
}

/// PocketBase's storage form: `2006-01-02 15:04:05.000Z` (milliseconds truncated).
pub(crate) fn format(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn dates_parse_as_pocketbase_parses_them() {
        let cases: &[(&str, &str)] = &[
            (" 2024-05-06", ""),
            ("2024-5-6", ""),
            ("2024-05-06T07:08", ""),
            ("2024-05-06", "2024-05-06 00:00:00.000Z"),
            ("2024-05-06T07:08:09.1Z", "2024-05-06 07:08:09.100Z"),
            ("2024-05-06 07:08:09.123Z", "2024-05-06 07:08:09.123Z"),
            ("2024-05-06 07:08:09.12Z", "2024-05-06 07:08:09.120Z"),
            ("2024-05-06 07:08:09 +0000 UTC", "2024-05-06 07:08:09.000Z"),
            ("Mon, 06 May 2024 07:08:09 GMT", "2024-05-06 07:08:09.000Z"),
            ("2024-05-06T24:00:00Z", ""),
            ("2024-02-30", ""),
            ("0001-01-01", ""),
            ("9999-12-31 23:59:59.999Z", "9999-12-31 23:59:59.999Z"),
            ("2024-05-06T07:08:09+0200", "2024-05-06 05:08:09.000Z"),
            ("2024-05-06T07:08:09+02:00", "2024-05-06 05:08:09.000Z"),
            ("3:04PM", "0000-01-01 15:04:00.000Z"),
            ("06 May 2024", "2024-05-06 00:00:00.000Z"),
            ("1714979289", ""),
            ("2024-05-06 07:08:09Z", "2024-05-06 07:08:09.000Z"),
            ("2024-05-06T07:08:09.123456789Z", "2024-05-06 07:08:09.123Z"),
            ("2024-05-06 07:08:09.5", "2024-05-06 07:08:09.500Z"),
            ("2024-05-06t07:08:09z", ""),
            ("garbage", ""),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), *want, "{input:?}");
        }
    }
}
