//! The auth flows against the real PocketBase 0.40.6: every refusal the conformance file does
//! not already pin (bad bodies, wrong types, long values, the test mail's checks) answered alike
//! by both servers, and the tokens of each flow crossing between them on one pb_data (a reset
//! link mailed by one server works in the other, both ways). Mail goes to a small SMTP sink
//! this file runs on 127.0.0.1.

use crate::common::{SU_EMAIL, Server, reference_bin};
use crate::rng::{Rng, env_num};
use base64::Engine;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One delivered mail: its envelope recipients and its raw text.
struct Mail {
    to: Vec<String>,
    raw: String,
}

/// An SMTP server that accepts anything (no TLS, no AUTH) and keeps what it is sent.
struct Sink {
    port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
    /// What clients said about themselves: `EHLO <name>` and `AUTH <mechanism> <user> <pass>`.
    said: Arc<Mutex<Vec<String>>>,
}

impl Sink {
    fn start() -> Sink {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind the sink");
        let port = l.local_addr().expect("addr").port();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let said = Arc::new(Mutex::new(Vec::new()));
        let (m2, s2) = (Arc::clone(&mails), Arc::clone(&said));
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (mails, said) = (Arc::clone(&m2), Arc::clone(&s2));
                std::thread::spawn(move || {
                    let _ = session(conn, &mails, &said);
                });
            }
        });
        Sink { port, mails, said }
    }

    fn smtp(&self) -> Value {
        json!({"enabled": true, "host": "127.0.0.1", "port": self.port, "tls": false,
            "username": "", "password": "", "authMethod": "", "localName": ""})
    }

    /// The newest mail to `to` after the first `after`, waited for.
    fn wait(&self, to: &str, after: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let mails = self.mails.lock().unwrap();
                let list: Vec<&Mail> = mails
                    .iter()
                    .filter(|m| m.to.iter().any(|t| t.eq_ignore_ascii_case(to)))
                    .collect();
                if list.len() > after {
                    return decoded(&list[list.len() - 1].raw);
                }
            }
            assert!(Instant::now() < deadline, "no mail to {to}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn count(&self, to: &str) -> usize {
        self.mails
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m.to.iter().any(|t| t.eq_ignore_ascii_case(to)))
            .count()
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn session(
    conn: std::net::TcpStream,
    mails: &Mutex<Vec<Mail>>,
    said: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    w.write_all(b"220 sink ESMTP\r\n")?;
    let mut to = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_ascii_uppercase();
        if cmd.starts_with("EHLO") {
            said.lock().unwrap().push(line.trim_end().to_owned());
            w.write_all(b"250-sink\r\n250-8BITMIME\r\n250 AUTH PLAIN LOGIN\r\n")?;
        } else if cmd.starts_with("AUTH PLAIN") {
            let mut resp = line.trim_end()[10..].trim().to_owned();
            if resp.is_empty() {
                w.write_all(b"334 \r\n")?;
                line.clear();
                r.read_line(&mut line)?;
                resp = line.trim().to_owned();
            }
            let parts: Vec<String> = b64(&resp).split('\0').map(str::to_owned).collect();
            said.lock()
                .unwrap()
                .push(format!("AUTH PLAIN {}", parts[1..].join(" ")));
            w.write_all(b"235 ok\r\n")?;
        } else if cmd.starts_with("AUTH LOGIN") {
            let mut got = Vec::new();
            let first = line.trim_end()[10..].trim().to_owned();
            if !first.is_empty() {
                got.push(b64(&first));
            }
            while got.len() < 2 {
                w.write_all(if got.is_empty() {
                    b"334 VXNlcm5hbWU6\r\n"
                } else {
                    b"334 UGFzc3dvcmQ6\r\n"
                })?;
                line.clear();
                r.read_line(&mut line)?;
                got.push(b64(&line));
            }
            said.lock()
                .unwrap()
                .push(format!("AUTH LOGIN {}", got.join(" ")));
            w.write_all(b"235 ok\r\n")?;
        } else if cmd.starts_with("RCPT TO:") {
            let addr = line.trim_end()[8..]
                .trim()
                .trim_matches(['<', '>'])
                .to_owned();
            to.push(addr);
            w.write_all(b"250 OK\r\n")?;
        } else if cmd == "DATA" {
            w.write_all(b"354 go on\r\n")?;
            let mut raw = String::new();
            loop {
                line.clear();
                if r.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                raw.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            mails.lock().unwrap().push(Mail {
                to: std::mem::take(&mut to),
                raw,
            });
            w.write_all(b"250 queued\r\n")?;
        } else if cmd == "QUIT" {
            w.write_all(b"221 bye\r\n")?;
            return Ok(());
        } else {
            // HELO, MAIL FROM, RSET, NOOP: fine.
            w.write_all(b"250 OK\r\n")?;
        }
    }
}

/// A mail's text with quoted-printable undone and base64 blocks decoded, so links and codes
/// can be searched whichever encoding the sender chose.
fn decoded(raw: &str) -> String {
    let mut out = raw.replace("=\r\n", "").replace("=\n", "");
    let mut qp = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find('=') {
        qp.push_str(&rest[..i]);
        let hex = rest.get(i + 1..i + 3).unwrap_or("");
        match u8::from_str_radix(hex, 16) {
            Ok(b) if hex.len() == 2 => {
                qp.push(char::from(b));
                rest = &rest[i + 3..];
            }
            _ => {
                qp.push('=');
                rest = &rest[i + 1..];
            }
        }
    }
    qp.push_str(rest);
    out = qp;
    let mut block = String::new();
    let mut extra = String::new();
    for l in raw.lines() {
        let l = l.trim();
        if l.len() >= 16
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        {
            block.push_str(l);
        } else if !block.is_empty() {
            if let Ok(b) = base64::engine::general_purpose::STANDARD.decode(&block) {
                extra.push_str(&String::from_utf8_lossy(&b));
            }
            block.clear();
        }
    }
    out + &extra
}

/// The token of a `/_/#/auth/{action}/{TOKEN}` link in a mail.
fn link_token(mail: &str, action: &str) -> String {
    let marker = format!("/_/#/auth/{action}/");
    let i = mail
        .find(&marker)
        .unwrap_or_else(|| panic!("no {action} link in: {mail}"));
    mail[i + marker.len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "_.-".contains(*c))
        .collect()
}

/// Both servers set up alike: SMTP to the sink, a plain auth collection `people`, one with OTP
/// `otpusers`, one user in each; the superuser's token.
fn setup(s: &Server, sink: &Sink) -> String {
    let su = s.su_token();
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(
            &json!({"smtp": sink.smtp(), "meta": {"appURL": "http://app.test",
            "senderName": "Tester", "senderAddress": "noreply@app.test"}}),
        ),
    );
    assert_eq!(r.status, 200, "settings: {}", r.json);
    s.create_collection(&su, json!({"name": "people", "type": "auth"}));
    s.create_collection(
        &su,
        json!({"name": "otpusers", "type": "auth", "otp": {"enabled": true}}),
    );
    for c in ["people", "otpusers"] {
        let r = s.req(
            "POST",
            &format!("/api/collections/{c}/records"),
            Some(&su),
            Some(
                &json!({"email": "known@example.com", "password": "Secret-12345",
                "passwordConfirm": "Secret-12345"}),
            ),
        );
        assert_eq!(r.status, 200, "user: {}", r.json);
    }
    su
}

#[test]
fn refusals_of_the_auth_flows_answer_as_pocketbase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    let reference = reference.to_str().expect("utf-8").to_owned();
    let sink = Sink::start();
    let (r, f) = std::thread::scope(|s| {
        let a = s.spawn(|| Server::start_bin(&reference));
        let b = s.spawn(Server::start);
        (a.join().unwrap(), b.join().unwrap())
    });
    let (su_r, su_f) = (setup(&r, &sink), setup(&f, &sink));
    let user_r = r.login("people", "known@example.com", "Secret-12345").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let user_f = f.login("people", "known@example.com", "Secret-12345").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = format!("{}@example.com", "a".repeat(250));
    // (path, caller: "" guest / "su" / "user", body)
    let cases: Vec<(&str, &str, Value)> = vec![
        ("people/request-verification", "", json!({})),
        ("people/request-verification", "", json!({"email": 5})),
        ("people/request-verification", "", json!({"email": "nope"})),
        ("people/request-verification", "", json!({"email": long})),
        (
            "people/request-verification",
            "",
            json!({"email": "unknown@example.com"}),
        ),
        (
            "nothing/request-verification",
            "",
            json!({"email": "a@b.cc"}),
        ),
        ("people/confirm-verification", "", json!({"token": 5})),
        ("people/confirm-verification", "", json!({"token": "a.b.c"})),
        (
            "_superusers/confirm-verification",
            "",
            json!({"token": "x"}),
        ),
        ("people/request-password-reset", "", json!({})),
        (
            "people/request-password-reset",
            "",
            json!({"email": "unknown@example.com"}),
        ),
        (
            "people/confirm-password-reset",
            "",
            json!({"token": "x", "password": "1", "passwordConfirm": "1"}),
        ),
        (
            "people/confirm-password-reset",
            "",
            json!({"password": "a".repeat(256), "passwordConfirm": "b"}),
        ),
        (
            "people/request-email-change",
            "",
            json!({"newEmail": "n@example.com"}),
        ),
        (
            "people/request-email-change",
            "su",
            json!({"newEmail": "n@example.com"}),
        ),
        ("people/request-email-change", "user", json!({})),
        (
            "people/request-email-change",
            "user",
            json!({"newEmail": "bad"}),
        ),
        ("people/confirm-email-change", "", json!({})),
        (
            "people/confirm-email-change",
            "",
            json!({"token": "x", "password": "y"}),
        ),
        (
            "people/confirm-email-change",
            "",
            json!({"token": "x", "password": "y".repeat(101)}),
        ),
        ("_superusers/confirm-email-change", "", json!({})),
        (
            "people/request-otp",
            "",
            json!({"email": "known@example.com"}),
        ),
        ("otpusers/request-otp", "", json!({"email": 1})),
        (
            "otpusers/auth-with-otp",
            "",
            json!({"otpId": "nope", "password": "1234"}),
        ),
        (
            "otpusers/auth-with-otp",
            "",
            json!({"otpId": "x".repeat(256), "password": "1".repeat(72)}),
        ),
        (
            "otpusers/auth-with-otp",
            "",
            json!({"otpId": 5, "password": "1"}),
        ),
        (
            "nothing/auth-with-password",
            "",
            json!({"identity": "a@b.cc", "password": "x"}),
        ),
        ("nothing/auth-with-otp", "", json!({})),
        ("people/auth-with-oauth2", "", json!({})),
        ("people/impersonate/nope", "su", json!({})),
        ("people/impersonate/nope", "user", json!({})),
        ("nothing/impersonate/nope", "su", json!({})),
    ];
    let token = |who: &str, reference: bool| -> Option<String> {
        match (who, reference) {
            ("su", true) => Some(su_r.clone()),
            ("su", false) => Some(su_f.clone()),
            ("user", true) => Some(user_r.clone()),
            ("user", false) => Some(user_f.clone()),
            _ => None,
        }
    };
    let mut diffs = Vec::new();
    for (path, who, body) in &cases {
        let path = format!("/api/collections/{path}");
        let a = r.req("POST", &path, token(who, true).as_deref(), Some(body));
        let b = f.req("POST", &path, token(who, false).as_deref(), Some(body));
        if (a.status, &a.json) != (b.status, &b.json) {
            diffs.push(format!(
                "POST {path} as {who:?} {body}:\n  pocketbase {} {}\n  ferrobase  {} {}",
                a.status, a.json, b.status, b.json
            ));
        }
    }
    // Impersonation's duration and the test mail's checks, for superusers.
    let su_cases: Vec<(String, Value)> = vec![
        ("/api/settings/test/email".into(), json!({})),
        (
            "/api/settings/test/email".into(),
            json!({"email": "bad", "template": "nope"}),
        ),
        (
            "/api/settings/test/email".into(),
            json!({"email": "a@b.cc", "template": "otp", "collection": "posts"}),
        ),
        (
            "/api/settings/test/email".into(),
            json!({"email": "a@b.cc", "template": "otp", "collection": "people"}),
        ),
    ];
    for (path, body) in &su_cases {
        let a = r.req("POST", path, Some(&su_r), Some(body));
        let b = f.req("POST", path, Some(&su_f), Some(body));
        if (a.status, &a.json) != (b.status, &b.json) {
            diffs.push(format!(
                "POST {path} {body}:\n  pocketbase {} {}\n  ferrobase  {} {}",
                a.status, a.json, b.status, b.json
            ));
        }
    }
    for body in [
        json!({"duration": -5}),
        json!({"duration": "abc"}),
        json!({"duration": 1.5}),
    ] {
        let id = |s: &Server, su: &str| {
            s.req("GET", "/api/collections/people/records", Some(su), None)
                .json["items"][0]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (ia, ib) = (id(&r, &su_r), id(&f, &su_f));
        let a = r.req(
            "POST",
            &format!("/api/collections/people/impersonate/{ia}"),
            Some(&su_r),
            Some(&body),
        );
        let b = f.req(
            "POST",
            &format!("/api/collections/people/impersonate/{ib}"),
            Some(&su_f),
            Some(&body),
        );
        if (a.status, &a.json) != (b.status, &b.json) {
            diffs.push(format!(
                "impersonate {body}:\n  pocketbase {} {}\n  ferrobase  {} {}",
                a.status, a.json, b.status, b.json
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    // Both test mails of the last case arrived, rendered from the collection's template.
    let mail = sink.wait("a@b.cc", 1);
    assert!(mail.contains("123456"), "{mail}");
}

/// A reset link mailed by `first` on a pb_data works in `second` on the same pb_data, once;
/// and so does a verification link.
fn links_cross(first: &str, second: &str) {
    let sink = Sink::start();
    let a = Server::start_bin(first);
    let _su = setup(&a, &sink);
    let email = "known@example.com";
    let before = sink.count(email);
    let r = a.req(
        "POST",
        "/api/collections/people/request-password-reset",
        None,
        Some(&json!({"email": email})),
    );
    assert_eq!(r.status, 204);
    let reset = link_token(&sink.wait(email, before), "confirm-password-reset");
    let before = sink.count(email);
    let r = a.req(
        "POST",
        "/api/collections/people/request-verification",
        None,
        Some(&json!({"email": email})),
    );
    assert_eq!(r.status, 204);
    let verify = link_token(&sink.wait(email, before), "confirm-verification");
    let dir = a.into_dir();
    let b = Server::start_bin_in(second, dir, Duration::from_secs(20));
    let r = b.req(
        "POST",
        "/api/collections/people/confirm-verification",
        None,
        Some(&json!({"token": verify})),
    );
    assert_eq!(
        r.status, 204,
        "{first} -> {second} verification: {}",
        r.json
    );
    let body = json!({"token": reset, "password": "Other-12345", "passwordConfirm": "Other-12345"});
    let r = b.req(
        "POST",
        "/api/collections/people/confirm-password-reset",
        None,
        Some(&body),
    );
    assert_eq!(r.status, 204, "{first} -> {second} reset: {}", r.json);
    let r = b.login("people", email, "Other-12345");
    assert_eq!(r.status, 200);
    assert_eq!(r.json["record"]["verified"], true);
    // Used once: the new password rotated the tokenKey.
    let r = b.req(
        "POST",
        "/api/collections/people/confirm-password-reset",
        None,
        Some(&body),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["data"]["token"]["code"], "validation_invalid_token");
    assert_eq!(
        b.login("_superusers", SU_EMAIL, crate::common::SU_PASS)
            .status,
        200
    );
}

#[test]
fn links_mailed_by_pocketbase_work_in_ferrobase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    links_cross(
        reference.to_str().expect("utf-8"),
        &crate::common::ferrobase_bin(),
    );
}

#[test]
fn links_mailed_by_ferrobase_work_in_pocketbase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    links_cross(
        &crate::common::ferrobase_bin(),
        reference.to_str().expect("utf-8"),
    );
}

/// The OTP code in a mail (the digits inside `<strong>`).
fn mail_code(mail: &str) -> String {
    let i = mail
        .find("<strong>")
        .unwrap_or_else(|| panic!("no code in: {mail}"));
    mail[i + 8..]
        .chars()
        .skip_while(|c| c.is_whitespace())
        .take_while(char::is_ascii_digit)
        .collect()
}

/// What one server answers along: an OTP used after the user's password changed, then the
/// OTPs left after the user is deleted.
fn otp_lifecycle(bin: Option<&str>) -> Vec<Value> {
    let sink = Sink::start();
    let s = match bin {
        Some(b) => Server::start_bin(b),
        None => Server::start(),
    };
    let su = setup(&s, &sink);
    let email = "known@example.com";
    let user = s.req("GET", "/api/collections/otpusers/records", Some(&su), None);
    let id = user.json["items"][0]["id"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    let otp = || {
        let before = sink.count(email);
        let r = s.req(
            "POST",
            "/api/collections/otpusers/request-otp",
            None,
            Some(&json!({"email": email})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        let code = mail_code(&sink.wait(email, before));
        (r.json["otpId"].as_str().unwrap().to_owned(), code)
    };
    let (otp_id, code) = otp();
    let r = s.req(
        "PATCH",
        &format!("/api/collections/otpusers/records/{id}"),
        Some(&su),
        Some(&json!({"password": "Changed-12345", "passwordConfirm": "Changed-12345"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let r = s.req(
        "POST",
        "/api/collections/otpusers/auth-with-otp",
        None,
        Some(&json!({"otpId": otp_id, "password": code})),
    );
    seen.push(json!([r.status, r.json]));
    let _ = otp();
    let count = |s: &Server| {
        s.req(
            "GET",
            &format!("/api/collections/_otps/records?filter=recordRef%3D%27{id}%27"),
            Some(&su),
            None,
        )
        .json["totalItems"]
            .clone()
    };
    seen.push(count(&s));
    let r = s.req(
        "DELETE",
        &format!("/api/collections/otpusers/records/{id}"),
        Some(&su),
        None,
    );
    assert_eq!(r.status, 204);
    seen.push(count(&s));
    seen
}

#[test]
fn otps_end_with_a_new_password_and_with_their_record_as_in_pocketbase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    let ours = otp_lifecycle(None);
    assert_eq!(
        ours,
        otp_lifecycle(Some(reference.to_str().expect("utf-8")))
    );
    assert_eq!(
        ours,
        vec![
            json!([400, {"data": {}, "message": "Invalid or expired OTP.", "status": 400}]),
            json!(1),
            json!(0)
        ]
    );
}

/// What one server answers in the MFA steps under `mfa.rule`: a record the rule does not match
/// signs in with one method; one it matches gets `{mfaId}`, and completes with an OTP whose
/// `mfaId` comes in the query string.
fn mfa_steps(bin: Option<&str>) -> Vec<Value> {
    let sink = Sink::start();
    let s = match bin {
        Some(b) => Server::start_bin(b),
        None => Server::start(),
    };
    let su = setup(&s, &sink);
    s.create_collection(
        &su,
        json!({"name": "guarded", "type": "auth", "otp": {"enabled": true},
            "mfa": {"enabled": true, "rule": "email ~ 'admin'"}}),
    );
    for email in ["plain@example.com", "admin@example.com"] {
        let r = s.req(
            "POST",
            "/api/collections/guarded/records",
            Some(&su),
            Some(&json!({"email": email, "password": "Secret-12345",
                "passwordConfirm": "Secret-12345"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let shape = |r: &crate::common::Resp| {
        let mut keys: Vec<String> = r
            .json
            .as_object()
            .map_or_else(Vec::new, |o| o.keys().cloned().collect());
        keys.sort();
        json!([r.status, keys])
    };
    let mut seen = Vec::new();
    let plain = s.login("guarded", "plain@example.com", "Secret-12345");
    seen.push(shape(&plain));
    let first = s.login("guarded", "admin@example.com", "Secret-12345");
    seen.push(shape(&first));
    let mfa_id = first.json["mfaId"].as_str().unwrap_or("").to_owned();
    let before = sink.count("admin@example.com");
    let r = s.req(
        "POST",
        "/api/collections/guarded/request-otp",
        None,
        Some(&json!({"email": "admin@example.com"})),
    );
    let code = mail_code(&sink.wait("admin@example.com", before));
    // PocketBase notes the OTP's `sentTo` (what lets the OTP step verify the record) only after
    // the mail went out: the mail can reach the sink first. Wait for the note, as a client
    // reading its inbox would in practice.
    let otp_path = format!(
        "/api/collections/_otps/records/{}",
        r.json["otpId"].as_str().unwrap_or("")
    );
    for _ in 0..100 {
        let o = s.req("GET", &otp_path, Some(&su), None);
        if o.status != 200 || o.json["sentTo"].as_str().is_some_and(|t| !t.is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let second = s.req(
        "POST",
        &format!("/api/collections/guarded/auth-with-otp?mfaId={mfa_id}"),
        None,
        Some(&json!({"otpId": r.json["otpId"], "password": code})),
    );
    seen.push(shape(&second));
    // With MFA on, the OTP step verified the record but kept its password.
    seen.push(second.json["record"]["verified"].clone());
    seen.push(json!(
        s.login("guarded", "admin@example.com", "Secret-12345")
            .status
    ));
    seen
}

#[test]
fn the_mfa_rule_and_a_query_mfa_id_work_as_in_pocketbase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    let ours = mfa_steps(None);
    assert_eq!(ours, mfa_steps(Some(reference.to_str().expect("utf-8"))));
    assert_eq!(
        ours,
        vec![
            json!([200, ["record", "token"]]),
            json!([401, ["mfaId"]]),
            json!([200, ["record", "token"]]),
            json!(true),
            json!(401)
        ]
    );
}

/// What one server says to the SMTP server for `smtp` settings (its EHLO name and credentials),
/// sending a test mail.
fn smtp_greeting(bin: Option<&str>, method: &str) -> Vec<String> {
    let sink = Sink::start();
    let s = match bin {
        Some(b) => Server::start_bin(b),
        None => Server::start(),
    };
    let su = s.su_token();
    let mut smtp = sink.smtp();
    smtp["username"] = json!("mailer");
    smtp["password"] = json!("mail-pass");
    smtp["authMethod"] = json!(method);
    smtp["localName"] = json!("relay.example.test");
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"smtp": smtp, "meta": {"senderAddress": "noreply@app.test"}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let r = s.req(
        "POST",
        "/api/settings/test/email",
        Some(&su),
        Some(&json!({"email": "to@example.com", "template": "verification"})),
    );
    assert_eq!(r.status, 204, "{}", r.json);
    sink.wait("to@example.com", 0);
    sink.said.lock().unwrap().clone()
}

#[test]
fn smtp_local_name_and_credentials_are_sent_as_pocketbase_sends_them() {
    let Some(reference) = reference_bin() else {
        return;
    };
    for method in ["PLAIN", "LOGIN"] {
        let ours = smtp_greeting(None, method);
        assert_eq!(
            ours,
            smtp_greeting(Some(reference.to_str().expect("utf-8")), method)
        );
        assert_eq!(
            ours,
            vec![
                "EHLO relay.example.test".to_owned(),
                format!("AUTH {method} mailer mail-pass")
            ]
        );
    }
}

/// What one server does on sign-ins from new places (`authAlert`, on by default): the origins it
/// keeps for the record (md5 of IP + user agent, newest first), and the alert mails it sends.
fn auth_alerts(bin: Option<&str>) -> Vec<Value> {
    let sink = Sink::start();
    let s = match bin {
        Some(b) => Server::start_bin(b),
        None => Server::start(),
    };
    let su = setup(&s, &sink);
    let email = "known@example.com";
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let sign_in = |ua: &str| {
        let r = agent
            .post(format!(
                "http://{}/api/collections/people/auth-with-password",
                s.addr
            ))
            .header("User-Agent", ua)
            .send_json(json!({"identity": email, "password": "Secret-12345"}))
            .unwrap();
        r.status().as_u16()
    };
    let origins = || {
        let r = s.req(
            "GET",
            "/api/collections/_authOrigins/records?sort=-created,fingerprint&perPage=50",
            Some(&su),
            None,
        );
        r.json["items"]
            .as_array()
            .unwrap()
            .iter()
            // The superuser signs in too (their origins are kept the same way): not these.
            .filter(|o| o["collectionRef"] != "pbc_3142635823")
            .map(|o| o["fingerprint"].clone())
            .collect::<Vec<Value>>()
    };
    let mut seen = Vec::new();
    // The first sign-in is kept but not mailed; the same place again changes nothing.
    for ua in ["agent-1", "agent-1"] {
        seen.push(json!(sign_in(ua)));
        // created times are kept to the millisecond: keep them apart.
        std::thread::sleep(Duration::from_millis(5));
    }
    seen.push(json!([origins(), sink.count(email)]));
    // A new place: mailed, with the time, the address and the agent.
    let before = sink.count(email);
    seen.push(json!(sign_in("agent-2 <b>")));
    let mail = sink.wait(email, before);
    assert!(mail.contains("Login from a new location"), "{mail}");
    assert!(
        mail.contains("127.0.0.1 agent-2 &lt;b&gt;"),
        "the agent, escaped: {mail}"
    );
    // Five more places: five more mails, and only the newest five origins kept.
    for i in 3..8 {
        std::thread::sleep(Duration::from_millis(5));
        seen.push(json!(sign_in(&format!("agent-{i}"))));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.count(email) < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.push(json!([origins(), sink.count(email)]));
    // A collection with the alert off keeps nothing.
    let r = s.req(
        "PATCH",
        "/api/collections/people",
        Some(&su),
        Some(&json!({"authAlert": {"enabled": false}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    seen.push(json!(sign_in("agent-9")));
    seen.push(json!([origins().len(), sink.count(email)]));
    seen
}

#[test]
fn sign_ins_from_new_places_are_kept_and_mailed_as_in_pocketbase() {
    let Some(reference) = reference_bin() else {
        return;
    };
    let ours = auth_alerts(None);
    assert_eq!(ours, auth_alerts(Some(reference.to_str().expect("utf-8"))));
    let md5 = |ua: &str| {
        use md5::Digest as _;
        json!(format!(
            "{:x}",
            md5::Md5::digest(format!("127.0.0.1{ua}").as_bytes())
        ))
    };
    assert_eq!(ours[2], json!([[md5("agent-1")], 0]));
    let kept: Vec<Value> = (3..8).rev().map(|i| md5(&format!("agent-{i}"))).collect();
    assert_eq!(ours[9], json!([kept, 6]));
    assert_eq!(ours[11], json!([5, 6]));
}

/// The values a generated auth request may carry in `key`: ones that pass, near misses,
/// wrong types. `own` are the server's own values (its user's token, its last OTP id), so each
/// server gets the same kind of value from its own side.
fn auth_value(g: &mut Rng, key: &str, own: &Own) -> Value {
    if g.pct(15) {
        return g
            .pick(&[
                json!(5),
                json!(1.5),
                json!(true),
                Value::Null,
                json!([]),
                json!(["known@example.com"]),
                json!({"a": 1}),
            ])
            .clone();
    }
    let long_email = format!("{}@example.com", "a".repeat(250));
    match key {
        "email" | "identity" | "newEmail" => g
            .pick(&[
                json!("known@example.com"),
                json!("KNOWN@Example.com"),
                json!("unknown@example.com"),
                json!(" known@example.com"),
                json!("known@example.com "),
                json!("not-an-email"),
                json!("a@b"),
                json!(""),
                json!(long_email),
                json!("ü@example.com"),
                json!("known@example.com\u{0}"),
                json!("new@example.com"),
            ])
            .clone(),
        "password" | "passwordConfirm" => g
            .pick(&[
                json!("Secret-12345"),
                json!("wrong-pass"),
                json!(""),
                json!("short"),
                json!("x".repeat(80)),
                json!("x".repeat(300)),
                json!("Secret-12345 "),
            ])
            .clone(),
        "token" => g
            .pick(&[
                json!(""),
                json!("abc"),
                json!("eyJhbGciOiJIUzI1NiJ9.e30.bad"),
                json!(own.user_token),
            ])
            .clone(),
        "identityField" => g
            .pick(&[
                json!("email"),
                json!("username"),
                json!(""),
                json!("password"),
                json!("id"),
                json!("nope"),
            ])
            .clone(),
        "otpId" => g
            .pick(&[
                json!(""),
                json!("nope"),
                json!(own.last_otp),
                json!("x".repeat(300)),
            ])
            .clone(),
        "provider" => g
            .pick(&[json!("google"), json!("github"), json!("nope"), json!("")])
            .clone(),
        "redirectURL" | "redirectUrl" => g
            .pick(&[json!("http://app.test/cb"), json!("not a url"), json!("")])
            .clone(),
        "createData" => g
            .pick(&[json!({}), json!("x"), json!({"name": "a"})])
            .clone(),
        "duration" => g
            .pick(&[
                json!(0),
                json!(60),
                json!(-1),
                json!("60"),
                json!("060"),
                json!("0x1_0"),
                json!("08"),
                json!("1e2"),
                json!(""),
            ])
            .clone(),
        _ => g.pick(&[json!("x"), json!(""), json!("0")]).clone(),
    }
}

/// A server's own values for generated requests.
struct Own {
    user_token: String,
    user_id: String,
    last_otp: String,
    last_mfa: String,
}

/// Random and server-made values (tokens, ids, dates) masked, so two servers' answers compare.
fn mask_made(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let made = [
                        "token",
                        "id",
                        "otpId",
                        "mfaId",
                        "created",
                        "updated",
                        "collectionId",
                    ];
                    let v = match v {
                        Value::String(s) if made.contains(&k.as_str()) && !s.is_empty() => {
                            json!("<made>")
                        }
                        other => mask_made(other),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(mask_made).collect()),
        other => other.clone(),
    }
}

/// Generated requests to every auth endpoint (bodies with the right keys and wrong ones, good
/// values, near misses and wrong types, as a guest, a user or a superuser, as JSON, broken JSON
/// or a form) get the same status and body from both servers, tokens and ids masked. Run one
/// after the other on both, so their states move alike (OTPs requested, mails sent).
#[test]
fn generated_auth_requests_are_answered_as_by_the_reference() {
    let Some(reference) = reference_bin() else {
        return;
    };
    let reference = reference.to_str().expect("utf-8").to_owned();
    let sink = Sink::start();
    let (r, f) = std::thread::scope(|s| {
        let a = s.spawn(|| Server::start_bin(&reference));
        // Ferrobase's own brute-force limits (pb.toml `[auth]`, tested in `bruteforce.rs`) off,
        // so that a long run compares PocketBase's answers only.
        let b = s.spawn(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let off = "[auth]\nfailures_per_identity = 0\nfailures_per_ip = 0\nmail_requests_per_ip = 0\n";
            std::fs::write(dir.path().join("pb.toml"), off).expect("pb.toml");
            Server::start_in(dir)
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    let (su_r, su_f) = (setup(&r, &sink), setup(&f, &sink));
    for (s, su) in [(&r, &su_r), (&f, &su_f)] {
        s.create_collection(
            su,
            json!({"name": "nopass", "type": "auth", "passwordAuth": {"enabled": false}}),
        );
    }
    // MFA: a password and an OTP, both asked for.
    for (s, su) in [(&r, &su_r), (&f, &su_f)] {
        s.create_collection(
            su,
            json!({"name": "mfausers", "type": "auth", "otp": {"enabled": true},
                "mfa": {"enabled": true}}),
        );
        let made = s.req(
            "POST",
            "/api/collections/mfausers/records",
            Some(su),
            Some(
                &json!({"email": "known@example.com", "password": "Secret-12345",
                "passwordConfirm": "Secret-12345"}),
            ),
        );
        assert_eq!(made.status, 200, "mfa user: {}", made.json);
    }
    let own_of = |s: &Server| {
        let login = s.login("people", "known@example.com", "Secret-12345").json;
        Own {
            user_token: login["token"].as_str().unwrap().to_owned(),
            user_id: login["record"]["id"].as_str().unwrap().to_owned(),
            last_otp: String::new(),
            last_mfa: String::new(),
        }
    };
    let mut own = [own_of(&r), own_of(&f)];
    let seed = env_num("AUTH_SEED").unwrap_or(0xa07f);
    let n = env_num("AUTH_CASES").unwrap_or(400);
    let mut g = Rng::new(seed);
    let endpoints: &[(&str, &[&str])] = &[
        (
            "auth-with-password",
            &["identity", "password", "identityField", "mfaId"],
        ),
        ("request-otp", &["email"]),
        ("auth-with-otp", &["otpId", "password", "mfaId"]),
        ("impersonate/{user}", &["duration"]),
        ("request-password-reset", &["email"]),
        (
            "confirm-password-reset",
            &["token", "password", "passwordConfirm"],
        ),
        ("request-verification", &["email"]),
        ("confirm-verification", &["token"]),
        ("request-email-change", &["newEmail"]),
        ("confirm-email-change", &["token", "password"]),
        ("auth-refresh", &[]),
        (
            "auth-with-oauth2",
            &[
                "provider",
                "code",
                "codeVerifier",
                "redirectURL",
                "createData",
            ],
        ),
    ];
    let mut diffs = Vec::new();
    for i in 0..n {
        let collection = *g.pick(&[
            "people", "people", "otpusers", "otpusers", "mfausers", "mfausers", "nopass", "nothing",
        ]);
        let (endpoint, keys) = *g.pick(endpoints);
        let who = *g.pick(&["", "", "user", "su"]);
        let mut bodies = [serde_json::Map::new(), serde_json::Map::new()];
        for key in keys.iter().copied().chain(g.pct(15).then_some("extra")) {
            if g.pct(25) {
                continue;
            }
            // One draw for both, from each server's own values.
            let state = g.next();
            for (body, own) in bodies.iter_mut().zip(&own) {
                let mut gk = Rng::new(state);
                body.insert(key.to_owned(), auth_value(&mut gk, key, own));
            }
        }
        let encoding = g.below(20);
        let mut answers = Vec::new();
        for (k, s) in [&r, &f].into_iter().enumerate() {
            let path = format!(
                "/api/collections/{collection}/{}",
                endpoint.replace("{user}", &own[k].user_id)
            );
            let token = match who {
                "su" => Some(if k == 0 { su_r.as_str() } else { su_f.as_str() }),
                "user" => Some(own[k].user_token.as_str()),
                _ => None,
            };
            let body = Value::Object(bodies[k].clone());
            let a = match encoding {
                0 => s.raw(
                    "POST",
                    &path,
                    token,
                    Some(("application/json", b"{\"email\": ")),
                ),
                1 => {
                    let form: Vec<String> = bodies[k]
                        .iter()
                        .filter_map(|(key, v)| {
                            v.as_str().map(|v| {
                                format!("{}={}", crate::common::enc(key), crate::common::enc(v))
                            })
                        })
                        .collect();
                    s.raw(
                        "POST",
                        &path,
                        token,
                        Some((
                            "application/x-www-form-urlencoded",
                            form.join("&").as_bytes(),
                        )),
                    )
                }
                _ => s.req("POST", &path, token, Some(&body)),
            };
            if endpoint == "request-otp"
                && let Some(id) = a.json["otpId"].as_str()
            {
                own[k].last_otp = id.to_owned();
            }
            if let Some(id) = a.json["mfaId"].as_str() {
                own[k].last_mfa = id.to_owned();
            }
            answers.push(a);
        }
        let (a, b) = (&answers[0], &answers[1]);
        if (a.status, mask_made(&a.json)) != (b.status, mask_made(&b.json)) {
            diffs.push(format!(
                "#{i} POST /api/collections/{collection}/{endpoint} as {who:?} (encoding {encoding}) {}:\n  pocketbase {} {}\n  ferrobase  {} {}",
                Value::Object(bodies[1].clone()),
                a.status,
                a.json,
                b.status,
                b.json
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {n} differ (AUTH_SEED={seed:#x} AUTH_CASES={n}):\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
