//! PocketBase's cron expressions: five space-separated segments (minute, hour, day of month,
//! month, day of week) or one of its macros, parsed with the error texts PocketBase gives
//! (settings validation shows them to the user). Pure: no clock, no IO.

use std::collections::BTreeSet;

/// A parsed schedule: the values each segment allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub minutes: BTreeSet<u32>,
    pub hours: BTreeSet<u32>,
    pub days: BTreeSet<u32>,
    pub months: BTreeSet<u32>,
    pub days_of_week: BTreeSet<u32>,
}

impl Schedule {
    /// Whether the schedule is due at this minute (day of week: 0 = Sunday).
    pub(crate) fn is_due(
        &self,
        minute: u32,
        hour: u32,
        day: u32,
        month: u32,
        weekday: u32,
    ) -> bool {
        self.minutes.contains(&minute)
            && self.hours.contains(&hour)
            && self.days.contains(&day)
            && self.months.contains(&month)
            && self.days_of_week.contains(&weekday)
    }
}

const MACROS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Parse an expression; the error is PocketBase's wording (lowercase, no final period: the
/// validation layer capitalises and ends it, as PocketBase's does).
pub(crate) fn parse(expr: &str) -> Result<Schedule, String> {
    let expr = MACROS
        .iter()
        .find(|(m, _)| *m == expr)
        .map_or(expr, |(_, e)| *e);
    // Split on single spaces: two spaces in a row make an empty segment, as for PocketBase.
    let segments: Vec<&str> = expr.split(' ').collect();
    if segments.len() != 5 {
        return Err("invalid cron expression - must be a valid macro or to have exactly 5 space separated segments".into());
    }
    Ok(Schedule {
        minutes: segment(segments[0], 0, 59)?,
        hours: segment(segments[1], 0, 23)?,
        days: segment(segments[2], 1, 31)?,
        months: segment(segments[3], 1, 12)?,
        days_of_week: segment(segments[4], 0, 6)?,
    })
}

/// Go's `strconv.Atoi` (an optional sign, then ASCII digits), with its error text.
fn atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {}: value out of range", go_quote(s)))
}

/// Go's `%q` of a string, for the ASCII text cron segments hold (anything else escaped).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let n = c as u32;
                if n < 0x80 {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{n:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn segment(text: &str, min: i64, max: i64) -> Result<BTreeSet<u32>, String> {
    let mut slots = BTreeSet::new();
    for part in text.split(',') {
        let step_parts: Vec<&str> = part.split('/').collect();
        let step = match step_parts.len() {
            1 => 1,
            2 => {
                let s = atoi(step_parts[1])?;
                if s < 1 || s > max {
                    return Err(format!(
                        "invalid segment step boundary - the step must be between 1 and the {max}"
                    ));
                }
                s
            }
            _ => {
                return Err(
                    "invalid segment step format - must be in the format */n or 1-30/n".into(),
                );
            }
        };
        let (lo, hi) = if step_parts[0] == "*" {
            (min, max)
        } else {
            let range: Vec<&str> = step_parts[0].split('-').collect();
            match range.len() {
                1 => {
                    if step != 1 {
                        return Err("invalid segment step - step > 1 could be used only with the wildcard or range format".into());
                    }
                    let v = atoi(range[0])?;
                    if v < min || v > max {
                        return Err("invalid segment value - must be between the min and max of the segment".into());
                    }
                    (v, v)
                }
                2 => {
                    let lo = atoi(range[0])?;
                    if lo < min || lo > max {
                        return Err(format!(
                            "invalid segment range minimum - must be between {min} and {max}"
                        ));
                    }
                    let hi = atoi(range[1])?;
                    if hi < lo || hi > max {
                        return Err(format!(
                            "invalid segment range maximum - must be between {lo} and {max}"
                        ));
                    }
                    (lo, hi)
                }
                _ => {
                    return Err(
                        "invalid segment range format - the range must have 1 or 2 parts".into(),
                    );
                }
            }
        };
        let mut v = lo;
        while v <= hi {
            slots.insert(u32::try_from(v).expect("checked against the segment's bounds"));
            v += step;
        }
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macros_and_ranges() {
        let s = parse("@daily").unwrap();
        assert!(s.is_due(0, 0, 17, 5, 3));
        assert!(!s.is_due(1, 0, 17, 5, 3));
        let s = parse("*/15 1-3 * * 1,5").unwrap();
        assert_eq!(
            s.minutes.iter().copied().collect::<Vec<_>>(),
            vec![0, 15, 30, 45]
        );
        assert_eq!(s.hours.len(), 3);
        assert_eq!(
            s.days_of_week.iter().copied().collect::<Vec<_>>(),
            vec![1, 5]
        );
        assert!(
            parse("0 0 31 2 *").is_ok(),
            "impossible dates are still valid"
        );
        assert!(parse("+5 * * * *").is_ok(), "Atoi takes a sign");
    }

    #[test]
    fn errors_are_pocketbases_words() {
        let cases = [
            (
                "* * * *",
                "invalid cron expression - must be a valid macro or to have exactly 5 space separated segments",
            ),
            (
                "@every 5m",
                "invalid cron expression - must be a valid macro or to have exactly 5 space separated segments",
            ),
            (
                "61 * * * *",
                "invalid segment value - must be between the min and max of the segment",
            ),
            (
                "*/0 * * * *",
                "invalid segment step boundary - the step must be between 1 and the 59",
            ),
            ("a b c d e", "strconv.Atoi: parsing \"a\": invalid syntax"),
            (
                "5-1 * * * *",
                "invalid segment range maximum - must be between 5 and 59",
            ),
            (
                "* * * * 7",
                "invalid segment value - must be between the min and max of the segment",
            ),
            (
                "5/2 * * * *",
                "invalid segment step - step > 1 could be used only with the wildcard or range format",
            ),
            (
                "1/2/3 * * * *",
                "invalid segment step format - must be in the format */n or 1-30/n",
            ),
            (
                "1-2-3 * * * *",
                "invalid segment range format - the range must have 1 or 2 parts",
            ),
            (
                "99999999999999999999 * * * *",
                "strconv.Atoi: parsing \"99999999999999999999\": value out of range",
            ),
            ("0  * * *", "strconv.Atoi: parsing \"\": invalid syntax"),
        ];
        for (expr, want) in cases {
            assert_eq!(parse(expr).unwrap_err(), want, "{expr}");
        }
    }
}
