//! OAuth2 sign-in against a small OpenID Connect provider of our own on 127.0.0.1 (discovery,
//! authorize, token, userinfo and JWKS endpoints; RS256 ID tokens signed with a key made for the
//! test), driven over HTTP as the JS SDK drives it (auth-methods, the authorize URL, the code,
//! auth-with-oauth2), on ferrobase and on the reference PocketBase 0.40.6 alike: new records
//! with createData and mapped fields, the existing link, linking by a vouched-for email, the
//! account-takeover regressions (CVE-2026-44166's unchecked `createData.email`, an unverified
//! provider email), a provider answering errors or garbage, and the `@oauth2` redirect reaching
//! a realtime client.

use crate::common::{Server, needs, reference_bin};
use crate::realtime::{Sse, subscribe};
use base64::Engine;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLIENT_ID: &str = "ferrobase-test-client";
const CLIENT_SECRET: &str = "s3cret-of-the-test";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// How the provider misbehaves, if it does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Good,
    TokenError,
    TokenGarbage,
    UserInfoGarbage,
    ForgedIdToken,
    OtherAudience,
}

struct Grant {
    user: Value,
    challenge: String,
}

struct ProviderState {
    mode: Mode,
    /// The user the next authorization is for.
    next_user: Value,
    codes: HashMap<String, Grant>,
    tokens: HashMap<String, Value>,
    counter: u64,
}

/// The provider: a thread per connection, one request per connection.
struct Provider {
    port: u16,
    state: Arc<Mutex<ProviderState>>,
}

impl Provider {
    fn start(key: Arc<RsaKeyPair>) -> Provider {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(ProviderState {
            mode: Mode::Good,
            next_user: json!({}),
            codes: HashMap::new(),
            tokens: HashMap::new(),
            counter: 0,
        }));
        let st = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (st, key) = (Arc::clone(&st), Arc::clone(&key));
                std::thread::spawn(move || serve(conn, &st, &key, port));
            }
        });
        Provider { port, state }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set(&self, mode: Mode, user: Value) {
        let mut s = self.state.lock().unwrap();
        s.mode = mode;
        s.next_user = user;
    }
}

struct Req {
    method: String,
    path: String,
    query: HashMap<String, String>,
    headers: HashMap<String, String>,
    form: HashMap<String, String>,
}

fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn pairs(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (url_decode(k), url_decode(v))
        })
        .collect()
}

fn read_req(conn: &TcpStream) -> Option<Req> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    Some(Req {
        method,
        path: path.to_owned(),
        query: pairs(q),
        headers,
        form: pairs(&String::from_utf8_lossy(&body)),
    })
}

fn respond(mut conn: &TcpStream, status: u16, headers: &[(&str, &str)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let _ = write!(conn, "{head}\r\n{body}");
}

fn sign(key: &RsaKeyPair, claims: &Value) -> String {
    let head = b64(json!({"alg": "RS256", "kid": "test-key", "typ": "JWT"})
        .to_string()
        .as_bytes());
    let input = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        input.as_bytes(),
        &mut sig,
    )
    .unwrap();
    format!("{input}.{}", b64(&sig))
}

fn serve(conn: TcpStream, st: &Mutex<ProviderState>, key: &RsaKeyPair, port: u16) {
    let Some(req) = read_req(&conn) else { return };
    let json_ct = [("Content-Type", "application/json")];
    let issuer = format!("http://127.0.0.1:{port}");
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/.well-known/openid-configuration") => {
            let doc = json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "userinfo_endpoint": format!("{issuer}/userinfo"),
                "jwks_uri": format!("{issuer}/jwks"),
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            });
            respond(&conn, 200, &json_ct, &doc.to_string());
        }
        ("GET", "/authorize") => {
            // The user consents at once: back to the redirect URL with a fresh code.
            let mut s = st.lock().unwrap();
            s.counter += 1;
            let code = format!("code-{}-{}", s.counter, std::process::id());
            let grant = Grant {
                user: s.next_user.clone(),
                challenge: req.query.get("code_challenge").cloned().unwrap_or_default(),
            };
            s.codes.insert(code.clone(), grant);
            let loc = format!(
                "{}?code={}&state={}",
                req.query["redirect_uri"],
                url_encode(&code),
                url_encode(&req.query["state"])
            );
            respond(&conn, 302, &[("Location", &loc)], "");
        }
        ("POST", "/token") => {
            let mut s = st.lock().unwrap();
            let basic = req
                .headers
                .get("authorization")
                .and_then(|v| v.strip_prefix("Basic "))
                .map(|v| {
                    let raw = base64::engine::general_purpose::STANDARD.decode(v).unwrap();
                    String::from_utf8(raw).unwrap()
                });
            let (id, secret) = match &basic {
                Some(b) => {
                    let (i, s) = b.split_once(':').unwrap();
                    (url_decode(i), url_decode(s))
                }
                None => (
                    req.form.get("client_id").cloned().unwrap_or_default(),
                    req.form.get("client_secret").cloned().unwrap_or_default(),
                ),
            };
            let grant = s.codes.remove(req.form.get("code").map_or("", |c| c));
            let verifier = req.form.get("code_verifier").cloned().unwrap_or_default();
            let pkce_ok = grant.as_ref().is_some_and(|g| {
                use sha2::Digest;
                g.challenge == b64(&sha2::Sha256::digest(verifier.as_bytes()))
            });
            if id != CLIENT_ID || secret != CLIENT_SECRET || !pkce_ok {
                respond(&conn, 400, &json_ct, r#"{"error":"invalid_grant"}"#);
                return;
            }
            let user = grant.expect("checked").user;
            match s.mode {
                Mode::TokenError => {
                    respond(&conn, 500, &json_ct, r#"{"error":"server_error"}"#);
                    return;
                }
                Mode::TokenGarbage => {
                    respond(&conn, 200, &[("Content-Type", "text/html")], "<html>hi");
                    return;
                }
                _ => {}
            }
            s.counter += 1;
            let access = format!("at-{}", s.counter);
            s.tokens.insert(access.clone(), user.clone());
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let mut claims = user.as_object().cloned().unwrap_or_default();
            claims.insert("iss".into(), json!(issuer));
            let aud = if s.mode == Mode::OtherAudience {
                "someone-else"
            } else {
                CLIENT_ID
            };
            claims.insert("aud".into(), json!(aud));
            claims.insert("iat".into(), json!(now));
            claims.insert("exp".into(), json!(now + 600));
            let mut id_token = sign(key, &Value::Object(claims));
            if s.mode == Mode::ForgedIdToken {
                // Same header and signature, other claims: the signature no longer matches.
                let mut parts: Vec<String> = id_token.split('.').map(str::to_owned).collect();
                let mut forged = user.clone();
                forged["sub"] = json!("forged");
                forged["aud"] = json!(CLIENT_ID);
                parts[1] = b64(forged.to_string().as_bytes());
                id_token = parts.join(".");
            }
            let body = json!({"access_token": access, "token_type": "Bearer",
                "refresh_token": "rt", "expires_in": 3600, "id_token": id_token});
            respond(&conn, 200, &json_ct, &body.to_string());
        }
        ("GET", "/userinfo") => {
            let s = st.lock().unwrap();
            let token = req
                .headers
                .get("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            match (s.mode, s.tokens.get(token)) {
                (Mode::UserInfoGarbage, _) => respond(&conn, 200, &json_ct, "[1, 2"),
                (_, Some(u)) => respond(&conn, 200, &json_ct, &u.to_string()),
                (_, None) => respond(&conn, 401, &json_ct, r#"{"error":"invalid_token"}"#),
            }
        }
        ("GET", "/jwks") => {
            let parts: ring::rsa::PublicKeyComponents<Vec<u8>> = key.public().into();
            let (n, e) = (parts.n, parts.e);
            let jwks = json!({"keys": [{"kty": "RSA", "kid": "test-key", "alg": "RS256",
                "use": "sig", "n": b64(&n), "e": b64(&e)}]});
            respond(&conn, 200, &json_ct, &jwks.to_string());
        }
        _ => respond(&conn, 404, &json_ct, "{}"),
    }
}

/// An RSA key (PKCS#1 DER) made for this run by the `openssl` tool (ring signs but does not generate RSA
/// keys); None, with the skip message, without the tool.
fn test_key() -> Option<Arc<RsaKeyPair>> {
    let ok = std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !needs("the openssl tool (to make the provider's RSA key)", ok) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.der");
    let st = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .args(["-outform", "DER", "-out"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let der = std::fs::read(&path).unwrap();
    Some(Arc::new(RsaKeyPair::from_der(&der).unwrap()))
}

/// The auth collection `members`: OAuth2 on with `oidc` (user info endpoint) and `oidc2` (the
/// ID token checked against the JWKS), name/username/avatar mapped to text fields.
fn setup(s: &Server, p: &Provider) {
    let su = s.su_token();
    let base = p.base();
    let oidc = |name: &str, userinfo: bool| {
        json!({"name": name, "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET,
            "authURL": format!("{base}/authorize"), "tokenURL": format!("{base}/token"),
            "userInfoURL": if userinfo { format!("{base}/userinfo") } else { String::new() },
            "displayName": format!("Test {name}"), "pkce": true,
            "extra": if userinfo { json!({}) } else {
                json!({"jwksURL": format!("{base}/jwks"), "issuers": [base.clone()]}) }})
    };
    s.create_collection(
        &su,
        json!({"name": "members", "type": "auth",
            "listRule": "", "viewRule": "", "createRule": "",
            "fields": [
                {"name": "name", "type": "text"},
                {"name": "nick", "type": "text"},
                {"name": "pic", "type": "text"},
            ],
            "passwordAuth": {"enabled": true},
            "oauth2": {"enabled": true,
                "mappedFields": {"id": "", "name": "name", "username": "nick", "avatarURL": "pic"},
                "providers": [oidc("oidc", true), oidc("oidc2", false)]}}),
    );
}

fn get_raw(url: &str) -> (u16, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let res = agent.get(url).call().unwrap();
    let loc = res
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    (res.status().as_u16(), loc)
}

/// The JS SDK's sequence: auth-methods, the provider's authorize URL followed to its redirect,
/// the state checked, then auth-with-oauth2 with the code and the PKCE verifier.
fn sign_in(s: &Server, p: &Provider, provider: &str, user: Value, create: Option<Value>) -> Value {
    p.state.lock().unwrap().next_user = user;
    let methods = s.req("GET", "/api/collections/members/auth-methods", None, None);
    assert_eq!(methods.status, 200, "{}", methods.json);
    let info = methods.json["oauth2"]["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == provider)
        .unwrap_or_else(|| panic!("{provider} listed: {}", methods.json))
        .clone();
    let redirect = format!("http://{}/api/oauth2-redirect", s.addr);
    let url = format!(
        "{}{}",
        info["authURL"].as_str().unwrap(),
        url_encode(&redirect)
    );
    let (status, loc) = get_raw(&url);
    assert_eq!(status, 302);
    let loc = loc.unwrap();
    let q = pairs(loc.split_once('?').unwrap().1);
    assert_eq!(q["state"], info["state"].as_str().unwrap());
    let mut body = json!({"provider": provider, "code": q["code"],
        "codeVerifier": info["codeVerifier"], "redirectURL": redirect});
    if let Some(c) = create {
        body["createData"] = c;
    }
    let r = s.req(
        "POST",
        "/api/collections/members/auth-with-oauth2",
        None,
        Some(&body),
    );
    json!({"status": r.status, "body": r.json})
}

/// What both servers must agree on in an answer: status, message, and for a sign-in the
/// record's plain fields and the meta's (no ids, tokens or times).
fn summary(r: &Value) -> Value {
    let b = &r["body"];
    if r["status"] != 200 {
        return json!({"status": r["status"], "message": b["message"], "data": b["data"]});
    }
    let rec = &b["record"];
    let meta = &b["meta"];
    // Sorted: PocketBase writes `meta` from a Go map, in no fixed order.
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    };
    json!({"status": 200, "keys": keys(b), "recordKeys": keys(rec), "metaKeys": keys(meta),
        "email": rec["email"], "verified": rec["verified"], "name": rec["name"],
        "nick": rec["nick"], "pic": rec["pic"], "isNew": meta["isNew"],
        "metaEmail": meta["email"], "metaName": meta["name"], "metaUsername": meta["username"],
        "metaId": meta["id"], "metaAvatar": meta["avatarURL"], "refresh": meta["refreshToken"],
        "rawSub": meta["rawUser"]["sub"], "expirySet": meta["expiry"].as_str().is_some_and(|e| !e.is_empty()),
        "hasToken": b["token"].as_str().is_some_and(|t| !t.is_empty())})
}

fn user(sub: &str, email: &str, verified: bool) -> Value {
    json!({"sub": sub, "name": format!("Name of {sub}"), "preferred_username": format!("{sub}_u"),
        "picture": format!("https://img.example.com/{sub}.png"), "email": email,
        "email_verified": verified})
}

fn count(s: &Server, su: &str, collection: &str) -> u64 {
    let r = s.req(
        "GET",
        &format!("/api/collections/{collection}/records?perPage=1"),
        Some(su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["totalItems"].as_u64().unwrap()
}

fn id_of(r: &Value) -> String {
    r["body"]["record"]["id"].as_str().unwrap_or("").to_owned()
}

/// The whole scenario on one server; what it saw, in order, summarised.
fn scenario(s: &Server, p: &Provider) -> Vec<(String, Value)> {
    setup(s, p);
    let su = s.su_token();
    let mut seen = Vec::new();
    let mut note = |label: &str, r: &Value| seen.push((label.to_owned(), summary(r)));

    // A new record: createData wins over the mapped name; nick and pic are mapped.
    p.set(Mode::Good, json!({}));
    let first = sign_in(
        s,
        p,
        "oidc",
        user("alice", "alice@example.com", true),
        Some(json!({"name": "Alice From CreateData"})),
    );
    note("new", &first);
    assert_eq!(first["status"], 200, "{first}");
    let again = sign_in(s, p, "oidc", user("alice", "alice@example.com", true), None);
    note("existing link", &again);
    assert_eq!(id_of(&again), id_of(&first));

    // Linking by a vouched-for email to an unverified record made with a password: the
    // password is replaced, the record verified.
    let r = s.req("POST", "/api/collections/members/records", None,
        Some(&json!({"email": "bob@example.com", "password": "bob-pass-123", "passwordConfirm": "bob-pass-123"})));
    assert_eq!(r.status, 200, "{}", r.json);
    let bob_id = r.json["id"].as_str().unwrap().to_owned();
    let linked = sign_in(s, p, "oidc", user("bob-sub", "bob@example.com", true), None);
    note("linked by email", &linked);
    assert_eq!(id_of(&linked), bob_id);
    assert_eq!(
        s.login("members", "bob@example.com", "bob-pass-123").status,
        400
    );

    // An unverified provider email never links to the account holding that address.
    let r = s.req("POST", "/api/collections/members/records", Some(&su),
        Some(&json!({"email": "carol@example.com", "password": "carol-pass-1", "passwordConfirm": "carol-pass-1", "verified": true})));
    assert_eq!(r.status, 200, "{}", r.json);
    let carol_id = r.json["id"].as_str().unwrap().to_owned();
    let mallory = sign_in(
        s,
        p,
        "oidc",
        user("mallory", "carol@example.com", false),
        None,
    );
    note("unverified email", &mallory);
    assert_ne!(id_of(&mallory), carol_id);
    assert_eq!(
        s.login("members", "carol@example.com", "carol-pass-1")
            .status,
        200
    );

    // CVE-2026-44166: createData.email of someone else's gives an unverified record, and the
    // address's owner signing in takes it back (password reset, the attacker's link dropped).
    let pre = sign_in(
        s,
        p,
        "oidc",
        user("attacker", "attacker@example.com", true),
        Some(json!({"email": "victim@example.com"})),
    );
    note("pre-hijack attempt", &pre);
    assert_eq!(pre["body"]["record"]["verified"], false, "{pre}");
    let victim = sign_in(
        s,
        p,
        "oidc",
        user("victim", "victim@example.com", true),
        None,
    );
    note("victim signs in", &victim);
    assert_eq!(victim["body"]["record"]["verified"], true);
    let back = sign_in(
        s,
        p,
        "oidc",
        user("attacker", "attacker@example.com", true),
        None,
    );
    note("attacker again", &back);
    assert_ne!(
        id_of(&back),
        id_of(&victim),
        "the attacker reached the victim's account"
    );

    // The ID token path (no user info endpoint): checked against the JWKS.
    let t = sign_in(s, p, "oidc2", user("dave", "dave@example.com", true), None);
    note("id token", &t);
    assert_eq!(t["status"], 200, "{t}");

    // A provider answering errors or garbage changes nothing.
    let (members, links) = (count(s, &su, "members"), count(s, &su, "_externalAuths"));
    for (mode, provider) in [
        (Mode::TokenError, "oidc"),
        (Mode::TokenGarbage, "oidc"),
        (Mode::UserInfoGarbage, "oidc"),
        (Mode::ForgedIdToken, "oidc2"),
        (Mode::OtherAudience, "oidc2"),
    ] {
        p.set(mode, json!({}));
        let r = sign_in(s, p, provider, user("erin", "erin@example.com", true), None);
        note(&format!("{mode:?}"), &r);
        assert_eq!(r["status"], 400, "{mode:?}: {r}");
    }
    p.set(Mode::Good, json!({}));
    assert_eq!(count(s, &su, "members"), members);
    assert_eq!(count(s, &su, "_externalAuths"), links);

    // Bad forms.
    for body in [
        json!({}),
        json!({"provider": "nope", "code": "x"}),
        json!({"provider": "oidc"}),
    ] {
        let r = s.req(
            "POST",
            "/api/collections/members/auth-with-oauth2",
            None,
            Some(&body),
        );
        note(
            &format!("form {body}"),
            &json!({"status": r.status, "body": r.json}),
        );
    }
    seen
}

/// Every step's answers compared; all differences shown at once.
fn compare(ours: &[(String, Value)], theirs: &[(String, Value)]) {
    assert_eq!(ours.len(), theirs.len());
    let diffs: Vec<String> = ours
        .iter()
        .zip(theirs)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((l, a), (_, b))| format!("{l}:\n  ferrobase: {a}\n  PocketBase: {b}"))
        .collect();
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn oauth2_sign_in_matches_pocketbase_against_a_real_oidc_provider() {
    let Some(key) = test_key() else { return };
    let p = Provider::start(key);
    let ours = scenario(&Server::start(), &p);
    let Some(bin) = reference_bin() else { return };
    let reference = Server::start_bin(bin.to_str().unwrap());
    let theirs = scenario(&reference, &p);
    compare(&ours, &theirs);
}

/// A POSTed form to `path`, read off the socket: status and `Location`.
fn post_form_raw(addr: &str, path: &str, form: &str) -> (u16, Option<String>) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut loc = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("location")
        {
            loc = Some(v.trim().to_owned());
        }
    }
    (status, loc)
}

/// The provider's redirect reaches the realtime client named by the state, once (the client
/// is unsubscribed from `@oauth2` after it): GET answers 307, a POSTed form 303, an unknown or
/// used state goes to the failure page and sends nothing.
fn redirect_scenario(s: &Server) -> Vec<Value> {
    let mut seen = Vec::new();
    let sse = Sse::open(&s.addr);
    assert_eq!(subscribe(s, &sse, None, &["@oauth2".to_owned()]), 204);
    let url = format!(
        "http://{}/api/oauth2-redirect?state={}&code=the-code",
        s.addr, sse.client_id
    );
    seen.push(json!(get_raw(&url)));
    let events = sse.drain(Duration::from_millis(500));
    let shown: Vec<Value> = events
        .iter()
        .map(|(n, d)| {
            json!([
                n,
                d["state"] == sse.client_id.as_str(),
                d["code"],
                d.get("error")
            ])
        })
        .collect();
    seen.push(json!(shown));
    // Used once: the client no longer listens.
    seen.push(json!(get_raw(&url)));
    seen.push(json!(sse.drain(Duration::from_millis(300)).len()));
    assert_eq!(subscribe(s, &sse, None, &["@oauth2".to_owned()]), 204);
    let form = format!("state={}&error=access_denied", sse.client_id);
    seen.push(json!(post_form_raw(&s.addr, "/api/oauth2-redirect", &form)));
    let events = sse.drain(Duration::from_millis(500));
    let shown: Vec<Value> = events
        .iter()
        .map(|(n, d)| json!([n, d["code"], d["error"]]))
        .collect();
    seen.push(json!(shown));
    seen.push(json!(get_raw(&format!(
        "http://{}/api/oauth2-redirect?state=nobody&code=x",
        s.addr
    ))));
    seen
}

#[test]
fn the_oauth2_redirect_reaches_the_realtime_client_as_in_pocketbase() {
    let ours = redirect_scenario(&Server::start());
    assert_eq!(ours[0], json!([307, "../_/#/auth/oauth2-redirect-success"]));
    assert_eq!(ours[1], json!([["@oauth2", true, "the-code", null]]));
    assert_eq!(ours[4], json!([303, "../_/#/auth/oauth2-redirect-failure"]));
    assert_eq!(ours[5], json!([["@oauth2", "", "access_denied"]]));
    let Some(bin) = reference_bin() else { return };
    let theirs = redirect_scenario(&Server::start_bin(bin.to_str().unwrap()));
    assert_eq!(ours, theirs);
}

/// auth-methods' OAuth2 listing, with the state and the PKCE pair (random) written as
/// placeholders; `logo` aside (PocketBase ships SVG logos, ferrobase none).
fn listing(s: &Server, p: &Provider) -> Value {
    setup(s, p);
    let su = s.su_token();
    let r = s.req(
        "PATCH",
        "/api/collections/members",
        Some(&su),
        Some(&json!({"oauth2": {"enabled": true, "providers": [
            // displayName given: PocketBase's PATCH merges provider objects into the old ones.
            {"name": "oidc", "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET, "displayName": "",
                "authURL": format!("{}/authorize?tenant=1", p.base()),
                "tokenURL": format!("{}/token", p.base())},
            {"name": "google", "clientId": "g id", "clientSecret": "s", "pkce": false},
            {"name": "github", "clientId": "gh", "clientSecret": "s", "displayName": "Code"},
            {"name": "apple", "clientId": "ap", "clientSecret": "s"},
        ]}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let m = s.req("GET", "/api/collections/members/auth-methods", None, None);
    assert_eq!(m.status, 200);
    let scrub = |list: &Value| -> Value {
        let items = list.as_array().unwrap().iter().map(|i| {
            let mut i = i.as_object().unwrap().clone();
            let (state, verifier, challenge) = (
                i["state"].as_str().unwrap().to_owned(),
                i["codeVerifier"].as_str().unwrap().to_owned(),
                i["codeChallenge"].as_str().unwrap().to_owned(),
            );
            assert_eq!(state.len(), 30);
            assert!(verifier.is_empty() || verifier.len() == 43);
            for k in ["authURL", "authUrl"] {
                let u = i[k].as_str().unwrap().replace(&state, "STATE");
                let u = if challenge.is_empty() {
                    u
                } else {
                    u.replace(&challenge, "CHALLENGE")
                };
                i.insert(k.into(), json!(u));
            }
            for k in ["state", "codeVerifier", "codeChallenge"] {
                let v = i[k].as_str().unwrap().is_empty();
                i.insert(k.into(), json!(if v { "" } else { "set" }));
            }
            i.insert("logo".into(), json!(null));
            Value::Object(i)
        });
        Value::Array(items.collect())
    };
    let keys: Vec<&String> = m.json.as_object().unwrap().keys().collect();
    json!({"keys": keys, "enabled": m.json["oauth2"]["enabled"],
        "providers": scrub(&m.json["oauth2"]["providers"]),
        "legacy": scrub(&m.json["authProviders"])})
}

#[test]
fn auth_methods_list_providers_as_pocketbase_does() {
    let Some(key) = test_key() else { return };
    let p = Provider::start(key);
    let ours = listing(&Server::start(), &p);
    assert_eq!(ours["providers"].as_array().unwrap().len(), 4, "{ours}");
    let Some(bin) = reference_bin() else { return };
    let theirs = listing(&Server::start_bin(bin.to_str().unwrap()), &p);
    assert_eq!(ours, theirs);
}

/// Collection PATCHes of `oauth2.providers` as the dashboard sends them: a provider named in
/// the body is decoded onto the stored one of that name (the secret, which answers never show,
/// and what else is left out keep their values; `extra` merges), in any order; every provider
/// has PocketBase's members. Each step's status and the providers a superuser then sees.
fn provider_patches(s: &Server) -> Vec<Value> {
    let su = s.su_token();
    let provs = json!([
        {"name": "google", "clientId": "g1", "clientSecret": "gs", "displayName": "G"},
        {"name": "github", "clientId": "h1", "clientSecret": "hs", "displayName": "H",
            "extra": {"a": 1}},
    ]);
    let r = s.req(
        "POST",
        "/api/collections",
        Some(&su),
        Some(&json!({"name": "pp", "type": "auth",
            "oauth2": {"enabled": true, "providers": provs}})),
    );
    let mut out = vec![json!(r.status)];
    let got = s.req("GET", "/api/collections/pp", Some(&su), None);
    let bodies = [
        json!({"oauth2": {"providers": got.json["oauth2"]["providers"]}}),
        json!({"oauth2": {"providers": [{"name": "github", "clientId": "h2"},
            {"name": "google", "clientId": "g2"}]}}),
        json!({"oauth2": {"providers": [{"name": "github", "clientId": "h3",
            "extra": {"b": 2}}]}}),
        json!({"oauth2": {"providers": [{"name": "github"}, {"name": "discord",
            "clientId": "d", "clientSecret": "ds"}]}}),
    ];
    for b in bodies {
        let r = s.req("PATCH", "/api/collections/pp", Some(&su), Some(&b));
        let now = s.req("GET", "/api/collections/pp", Some(&su), None);
        out.push(json!([
            r.status,
            if r.status == 200 { Value::Null } else { r.json },
            now.json["oauth2"]["providers"]
        ]));
    }
    out
}

#[test]
fn collection_patches_merge_oauth2_providers_by_name_as_pocketbase_does() {
    let ours = provider_patches(&Server::start());
    assert_eq!(
        ours[2][2][0]["displayName"], "H",
        "a left-out key keeps its value"
    );
    let Some(bin) = reference_bin() else { return };
    let theirs = provider_patches(&Server::start_bin(bin.to_str().unwrap()));
    assert_eq!(ours, theirs);
}
