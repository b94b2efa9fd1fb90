//! Owns OAuth2 sign-in's provider side: the providers PocketBase 0.40.6 knows here (generic
//! OpenID Connect as `oidc`, `oidc2`, `oidc3`, and Google, GitHub, GitLab, Microsoft, Apple,
//! Discord) with their default endpoints, scopes and PKCE, a collection's provider config laid
//! over them, the authorize URL, the code exchange, and the user info mapped to PocketBase's
//! `AuthUser` (whose `email` is set only when the provider vouches for it). No server HTTP
//! types: outbound calls go through `client`.

pub(crate) mod apple_name;
pub(crate) mod client;
pub(crate) mod id_token;

use crate::schema::Collection;
use base64::Engine;
use client::{FetchError, Outbound};
use id_token::IdTokenError;
use serde_json::{Map, Value, json};
use sha2::Digest;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub(crate) enum OAuth2Error {
    #[error("missing provider {0}")]
    UnknownProvider(String),
    #[error("{0}")]
    Fetch(#[from] FetchError),
    #[error("oauth2: cannot fetch token: {status} {body}")]
    TokenRefused { status: u16, body: String },
    #[error("oauth2: server response missing access_token")]
    NoAccessToken,
    #[error("failed to fetch OAuth2 user profile via {url} ({status})")]
    UserInfoRefused { url: String, status: u16 },
    #[error("invalid provider answer: {0}")]
    Garbage(String),
    #[error("id_token validation failed: {0}")]
    IdToken(#[from] IdTokenError),
}

/// How a provider's user info reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Oidc,
    Google,
    Github,
    Gitlab,
    Microsoft,
    Apple,
    Discord,
}

/// A provider ready to use: its defaults with the collection's config laid over them.
#[derive(Debug, Clone)]
pub(crate) struct Provider {
    kind: Kind,
    pub name: String,
    pub display_name: String,
    pub pkce: bool,
    client_id: String,
    client_secret: String,
    auth_url: String,
    token_url: String,
    user_info_url: String,
    scopes: Vec<&'static str>,
    extra: Map<String, Value>,
}

/// The defaults of the provider called `name`, as PocketBase's factories set them.
fn defaults(name: &str) -> Option<Provider> {
    let base = |kind, display: &str, scopes: &[&'static str], urls: [&str; 3]| Provider {
        kind,
        name: name.to_owned(),
        display_name: display.to_owned(),
        pkce: true,
        client_id: String::new(),
        client_secret: String::new(),
        auth_url: urls[0].to_owned(),
        token_url: urls[1].to_owned(),
        user_info_url: urls[2].to_owned(),
        scopes: scopes.to_vec(),
        extra: Map::new(),
    };
    Some(match name {
        "oidc" | "oidc2" | "oidc3" => base(
            Kind::Oidc,
            "OIDC",
            &["openid", "email", "profile"],
            ["", "", ""],
        ),
        "google" => base(
            Kind::Google,
            "Google",
            &[
                "https://www.googleapis.com/auth/userinfo.profile",
                "https://www.googleapis.com/auth/userinfo.email",
            ],
            [
                "https://accounts.google.com/o/oauth2/v2/auth",
                "https://oauth2.googleapis.com/token",
                "https://www.googleapis.com/oauth2/v3/userinfo",
            ],
        ),
        "github" => base(
            Kind::Github,
            "GitHub",
            &["read:user", "user:email"],
            [
                "https://github.com/login/oauth/authorize",
                "https://github.com/login/oauth/access_token",
                "https://api.github.com/user",
            ],
        ),
        "gitlab" => base(
            Kind::Gitlab,
            "GitLab",
            &["read_user"],
            [
                "https://gitlab.com/oauth/authorize",
                "https://gitlab.com/oauth/token",
                "https://gitlab.com/api/v4/user",
            ],
        ),
        "microsoft" => base(
            Kind::Microsoft,
            "Microsoft",
            &["User.Read"],
            [
                "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
                "https://login.microsoftonline.com/common/oauth2/v2.0/token",
                "https://graph.microsoft.com/v1.0/me",
            ],
        ),
        "apple" => base(
            Kind::Apple,
            "Apple",
            &["name", "email"],
            [
                "https://appleid.apple.com/auth/authorize",
                "https://appleid.apple.com/auth/token",
                "",
            ],
        ),
        "discord" => base(
            Kind::Discord,
            "Discord",
            &["identify", "email"],
            [
                "https://discord.com/api/oauth2/authorize",
                "https://discord.com/api/oauth2/token",
                "https://discord.com/api/users/@me",
            ],
        ),
        _ => return None,
    })
}

/// Apple's keys and issuer (its ID token is the only user info it gives).
const APPLE_JWKS_URL: &str = "https://appleid.apple.com/auth/keys";
const APPLE_ISSUER: &str = "https://appleid.apple.com";

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The configured providers of `c` when its OAuth2 is enabled (empty otherwise), in their
/// config order; unknown names are skipped as PocketBase skips providers it cannot set up.
pub(crate) fn providers(c: &Collection) -> Option<Vec<Provider>> {
    let o = c.auth_option("oauth2")?;
    if !o.get("enabled").and_then(Value::as_bool).unwrap_or(false) {
        return None;
    }
    let list = o.get("providers").and_then(Value::as_array);
    Some(
        list.into_iter()
            .flatten()
            .filter_map(|p| configure(p).ok())
            .collect(),
    )
}

/// The provider of `c` called `name` (the first config of that name).
pub(crate) fn provider(c: &Collection, name: &str) -> Option<Result<Provider, OAuth2Error>> {
    let list = c
        .auth_option("oauth2")?
        .get("providers")
        .and_then(Value::as_array)?;
    list.iter().find(|p| text(p, "name") == name).map(configure)
}

/// A provider config (`name`, `clientId`, `clientSecret`, `authURL`, `tokenURL`,
/// `userInfoURL`, `displayName`, `pkce`, `extra`) laid over its provider's defaults.
fn configure(config: &Value) -> Result<Provider, OAuth2Error> {
    let name = text(config, "name");
    let mut p = defaults(name).ok_or_else(|| OAuth2Error::UnknownProvider(name.to_owned()))?;
    let set = |slot: &mut String, key: &str| {
        let v = text(config, key);
        if !v.is_empty() {
            *slot = v.to_owned();
        }
    };
    set(&mut p.client_id, "clientId");
    set(&mut p.client_secret, "clientSecret");
    set(&mut p.auth_url, "authURL");
    set(&mut p.user_info_url, "userInfoURL");
    set(&mut p.token_url, "tokenURL");
    set(&mut p.display_name, "displayName");
    if let Some(b) = config.get("pkce").and_then(Value::as_bool) {
        p.pkce = b;
    }
    if let Some(Value::Object(extra)) = config.get("extra") {
        p.extra = extra.clone();
    }
    // Microsoft's email from its ID token needs one: "openid" joins its scopes.
    let claim_mode = match p.extra.get(MS_EMAIL_CLAIM) {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(_) | Value::Bool(_)) => true,
        _ => false,
    };
    if p.kind == Kind::Microsoft && claim_mode && !p.scopes.contains(&"openid") {
        p.scopes.push("openid");
    }
    Ok(p)
}

/// Go's `url.QueryEscape` (what PocketBase's authorize URLs are written with).
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `pairs` as Go's `url.Values.Encode` writes them: sorted by key.
fn encode_form(pairs: &[(&str, &str)]) -> String {
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A PKCE verifier's S256 challenge (unpadded base64url of its SHA-256).
pub(crate) fn s256_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier))
}

/// What auth-methods lists for a provider: a fresh state, the PKCE pair when the provider uses
/// PKCE, and the authorize URL ending in an empty `redirect_uri=` for the client to fill.
pub(crate) struct AuthStart {
    pub state: String,
    pub code_verifier: String,
    pub code_challenge: String,
    pub code_challenge_method: &'static str,
    pub auth_url: String,
}

impl Provider {
    pub(crate) fn start(&self) -> AuthStart {
        let state = crate::schema::ids::secret(30);
        let (verifier, challenge, method) = if self.pkce {
            let v = crate::schema::ids::secret(43);
            let c = s256_challenge(&v);
            (v, c, "S256")
        } else {
            (String::new(), String::new(), "")
        };
        let scope = self.scopes.join(" ");
        let mut params: Vec<(&str, &str)> = vec![
            ("client_id", &self.client_id),
            ("response_type", "code"),
            ("state", &state),
        ];
        if !scope.is_empty() {
            params.push(("scope", &scope));
        }
        if self.kind == Kind::Apple {
            params.push(("response_mode", "form_post"));
        }
        if self.pkce {
            params.push(("code_challenge", &challenge));
            params.push(("code_challenge_method", method));
        }
        let sep = if self.auth_url.contains('?') {
            '&'
        } else {
            '?'
        };
        let auth_url = format!(
            "{}{sep}{}&redirect_uri=",
            self.auth_url,
            encode_form(&params)
        );
        AuthStart {
            state,
            code_verifier: verifier,
            code_challenge: challenge,
            code_challenge_method: method,
            auth_url,
        }
    }

    /// Trade the authorization `code` for a token (the client credentials in a Basic header
    /// first, then in the form, as Go's oauth2 client finds out which the provider takes).
    pub(crate) async fn exchange(
        &self,
        code: &str,
        verifier: &str,
        redirect_url: &str,
    ) -> Result<Token, OAuth2Error> {
        let mut form: Vec<(&str, &str)> =
            vec![("grant_type", "authorization_code"), ("code", code)];
        if !redirect_url.is_empty() {
            form.push(("redirect_uri", redirect_url));
        }
        if self.pkce {
            form.push(("code_verifier", verifier));
        }
        let in_header = self.token_request(&form, true).await;
        match in_header {
            Ok(t) => Ok(t),
            Err(_) => self.token_request(&form, false).await,
        }
    }

    async fn token_request(
        &self,
        form: &[(&str, &str)],
        credentials_in_header: bool,
    ) -> Result<Token, OAuth2Error> {
        let mut form = form.to_vec();
        let mut req = Outbound::get(&self.token_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        req.method = "POST";
        if credentials_in_header {
            let basic = format!(
                "{}:{}",
                query_escape(&self.client_id),
                query_escape(&self.client_secret)
            );
            req = req.header(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(basic)
                ),
            );
        } else {
            form.push(("client_id", &self.client_id));
            if !self.client_secret.is_empty() {
                form.push(("client_secret", &self.client_secret));
            }
        }
        req.body = encode_form(&form).into_bytes();
        let reply = client::fetch(req).await?;
        if !(200..300).contains(&reply.status) {
            return Err(OAuth2Error::TokenRefused {
                status: reply.status,
                body: String::from_utf8_lossy(&reply.body)
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        Token::parse(&reply.content_type, &reply.body)
    }

    /// The signed-in user as PocketBase's `AuthUser`.
    pub(crate) async fn user(&self, token: &Token) -> Result<AuthUser, OAuth2Error> {
        let raw = self.raw_user(token).await?;
        let mut user = AuthUser {
            raw_user: raw.clone(),
            access_token: token.access_token.clone(),
            refresh_token: token.refresh_token.clone(),
            expiry: token.expiry.clone(),
            ..AuthUser::default()
        };
        let raw = Value::Object(raw);
        let s = |k: &str| text(&raw, k).to_owned();
        match self.kind {
            Kind::Oidc | Kind::Apple => {
                user.id = s("sub");
                user.name = s("name");
                if self.kind == Kind::Oidc {
                    user.username = s("preferred_username");
                    user.avatar_url = s("picture");
                }
                if truthy(raw.get("email_verified")) {
                    user.email = s("email");
                }
            }
            Kind::Google => {
                user.id = s("sub");
                user.name = s("name");
                user.avatar_url = s("picture");
                if raw.get("email_verified") == Some(&Value::Bool(true)) {
                    user.email = s("email");
                }
            }
            Kind::Github | Kind::Gitlab => {
                user.id = number_or_text(raw.get("id"));
                user.name = s("name");
                user.username = s(if self.kind == Kind::Github {
                    "login"
                } else {
                    "username"
                });
                user.avatar_url = s("avatar_url");
                if self.kind == Kind::Gitlab {
                    if !s("confirmed_at").is_empty() {
                        user.email = s("email");
                    }
                } else {
                    user.email = self.github_email(token).await?;
                }
            }
            Kind::Microsoft => {
                user.id = s("id");
                user.name = s("displayName");
                let mode = self.extra.get(MS_EMAIL_CLAIM).and_then(Value::as_str);
                user.email = microsoft_email(
                    mode.unwrap_or(""),
                    &s("mail"),
                    &token.id_token,
                    chrono::Utc::now().timestamp(),
                );
            }
            Kind::Discord => {
                user.id = s("id");
                user.username = s("username");
                let avatar = s("avatar");
                if !avatar.is_empty() {
                    user.avatar_url = format!(
                        "https://cdn.discordapp.com/avatars/{}/{avatar}.png",
                        user.id
                    );
                }
                user.name = s("global_name");
                if user.name.is_empty() {
                    let d = s("discriminator");
                    user.name = if d.is_empty() || d == "0" {
                        user.username.clone()
                    } else {
                        format!("{}#{d}", user.username)
                    };
                }
                if raw.get("verified") == Some(&Value::Bool(true)) {
                    user.email = s("email");
                }
            }
        }
        Ok(user)
    }

    /// The provider's raw user: its user info endpoint, or (OpenID Connect without one, and
    /// Apple) the ID token's checked claims.
    async fn raw_user(&self, token: &Token) -> Result<Map<String, Value>, OAuth2Error> {
        let from_id_token = match self.kind {
            Kind::Apple => true,
            Kind::Oidc => self.user_info_url.is_empty(),
            _ => false,
        };
        if from_id_token {
            return self.id_token_claims(token).await;
        }
        match self.get_json(&self.user_info_url, token).await? {
            Value::Object(m) => Ok(m),
            other => Err(OAuth2Error::Garbage(format!(
                "user info is not an object: {}",
                other.to_string().chars().take(100).collect::<String>()
            ))),
        }
    }

    async fn get_json(&self, url: &str, token: &Token) -> Result<Value, OAuth2Error> {
        let req = Outbound::get(url)
            .header("authorization", format!("Bearer {}", token.access_token))
            .header("accept", "application/json");
        let reply = client::fetch(req).await?;
        if reply.status >= 400 {
            return Err(OAuth2Error::UserInfoRefused {
                url: url.to_owned(),
                status: reply.status,
            });
        }
        serde_json::from_slice(&reply.body).map_err(|e| OAuth2Error::Garbage(e.to_string()))
    }

    /// The ID token's claims, validated as PocketBase validates them (audience = the client
    /// id, `extra.issuers`), its signature checked against `extra.jwksURL` when set (Apple:
    /// Apple's keys and issuer always).
    async fn id_token_claims(&self, token: &Token) -> Result<Map<String, Value>, OAuth2Error> {
        let claims = id_token::claims(&token.id_token)?;
        let mut issuers: Vec<String> = match self.extra.get("issuers") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
            _ => Vec::new(),
        };
        let mut jwks_url = text(&Value::Object(self.extra.clone()), "jwksURL").to_owned();
        if self.kind == Kind::Apple {
            issuers = vec![APPLE_ISSUER.to_owned()];
            jwks_url = APPLE_JWKS_URL.to_owned();
        }
        id_token::check_claims(
            &claims,
            Some(&self.client_id),
            &issuers,
            chrono::Utc::now().timestamp(),
        )?;
        if !jwks_url.is_empty() {
            let reply = client::fetch(Outbound::get(&jwks_url)).await?;
            if reply.status >= 400 {
                return Err(OAuth2Error::Garbage(format!(
                    "the key set answered {}",
                    reply.status
                )));
            }
            let jwks: Value = serde_json::from_slice(&reply.body)
                .map_err(|e| OAuth2Error::Garbage(e.to_string()))?;
            id_token::verify_signature(&token.id_token, &jwks)?;
        }
        Ok(claims)
    }

    /// GitHub's primary email, when verified (its user endpoint does not say).
    async fn github_email(&self, token: &Token) -> Result<String, OAuth2Error> {
        let url = format!("{}/emails", self.user_info_url.trim_end_matches('/'));
        let emails = self.get_json(&url, token).await?;
        Ok(emails
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| {
                e.get("verified") == Some(&Value::Bool(true))
                    && e.get("primary") == Some(&Value::Bool(true))
            })
            .map(|e| text(e, "email").to_owned())
            .unwrap_or_default())
    }
}

/// The Microsoft provider's `extra` key that picks where its email comes from.
const MS_EMAIL_CLAIM: &str = "idTokenEmailClaim";

/// Microsoft's email as PocketBase 0.40 picks it by `idTokenEmailClaim`: Graph's `mail` (the
/// default, which Microsoft does not promise is verified), or a claim of the ID token (read
/// without its signature, which came over TLS from the token endpoint, but with its times
/// checked): `verified_primary_email`, `email` when `xms_edov` (the domain's owner verified
/// it), either of those in that order (`any_verified`), or plain `email`.
fn microsoft_email(mode: &str, mail: &str, id_token: &str, now_s: i64) -> String {
    let claims = || {
        id_token::claims(id_token)
            .ok()
            .filter(|c| id_token::check_claims(c, None, &[], now_s).is_ok())
            .unwrap_or_default()
    };
    let claim =
        |c: &Map<String, Value>, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let primary = |c: &Map<String, Value>| claim(c, "verified_primary_email");
    let edov = |c: &Map<String, Value>| {
        if truthy(c.get("xms_edov")) {
            claim(c, "email")
        } else {
            String::new()
        }
    };
    match mode {
        "any_verified" => {
            let c = claims();
            let e = primary(&c);
            if e.is_empty() { edov(&c) } else { e }
        }
        "verified_primary_email" => primary(&claims()),
        "email_and_xms_edov" => edov(&claims()),
        "email" => claim(&claims(), "email"),
        _ => mail.to_owned(),
    }
}

/// Go's `cast.ToBool`: true, "true"/"1"/"t"/"T"/"TRUE"/"True", or a non-zero number.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(s.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        _ => false,
    }
}

fn number_or_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// A token endpoint's answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Token {
    pub access_token: String,
    pub refresh_token: String,
    /// PocketBase's datetime text, or "" when the provider gave no lifetime.
    pub expiry: String,
    pub id_token: String,
}

impl Token {
    /// A JSON answer, or a form-encoded one (`application/x-www-form-urlencoded`, `text/plain`).
    fn parse(content_type: &str, body: &[u8]) -> Result<Token, OAuth2Error> {
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let fields: Map<String, Value> =
            if mime == "application/x-www-form-urlencoded" || mime == "text/plain" {
                form_decode(&String::from_utf8_lossy(body))
            } else {
                match serde_json::from_slice(body) {
                    Ok(Value::Object(m)) => m,
                    _ => {
                        return Err(OAuth2Error::Garbage(
                            "the token answer is not a JSON object".into(),
                        ));
                    }
                }
            };
        let f = Value::Object(fields);
        let access_token = text(&f, "access_token").to_owned();
        if access_token.is_empty() {
            return Err(OAuth2Error::NoAccessToken);
        }
        let expires_in = match f.get("expires_in") {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            _ => 0,
        };
        let expiry = if expires_in > 0 {
            crate::schema::ids::format_time(
                chrono::Utc::now() + chrono::Duration::seconds(expires_in),
            )
        } else {
            String::new()
        };
        Ok(Token {
            access_token,
            refresh_token: text(&f, "refresh_token").to_owned(),
            expiry,
            id_token: text(&f, "id_token").to_owned(),
        })
    }
}

fn form_decode(s: &str) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in crate::http::url_pairs(s) {
        m.entry(k).or_insert(Value::String(v));
    }
    m
}

/// PocketBase's `AuthUser`: `email` only when the provider vouches for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuthUser {
    pub id: String,
    pub name: String,
    pub username: String,
    pub email: String,
    pub avatar_url: String,
    pub access_token: String,
    pub refresh_token: String,
    pub expiry: String,
    pub raw_user: Map<String, Value>,
}

impl AuthUser {
    /// The response's `meta`, keys sorted as Go writes a map (`rawUser`'s too), with the legacy
    /// `avatarUrl` and `isNew`.
    pub(crate) fn meta(&self, is_new: bool) -> Value {
        json!({
            "accessToken": self.access_token,
            "avatarURL": self.avatar_url,
            "avatarUrl": self.avatar_url,
            "email": self.email,
            "expiry": self.expiry,
            "id": self.id,
            "isNew": is_new,
            "name": self.name,
            "rawUser": sorted(Value::Object(self.raw_user.clone())),
            "refreshToken": self.refresh_token,
            "username": self.username,
        })
    }
}

/// `v` with every object's keys sorted (Go marshals maps that way).
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut pairs: Vec<(String, Value)> = m.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(pairs.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Download an avatar for a file field: public addresses only, at most `bytes_max` bytes, 10
/// seconds. The body and the URL's last path segment (the file's name).
pub(crate) async fn download_avatar(
    url: &str,
    bytes_max: usize,
) -> Result<(bytes::Bytes, String), OAuth2Error> {
    let mut req = Outbound::get(url);
    req.public_only = true;
    req.timeout = Duration::from_secs(10);
    req.body_bytes_max = bytes_max;
    let reply = client::fetch(req).await?;
    if !(200..400).contains(&reply.status) {
        return Err(OAuth2Error::Garbage(format!(
            "failed to download url {url} ({})",
            reply.status
        )));
    }
    let path = url.split(['?', '#']).next().unwrap_or("");
    let name = path.rsplit('/').next().unwrap_or("").to_owned();
    Ok((reply.body, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorize_urls_are_written_as_gos_oauth2_writes_them() {
        let p = configure(&json!({"name": "google", "clientId": "id 1", "pkce": false})).unwrap();
        let s = p.start();
        assert_eq!(
            s.auth_url,
            format!(
                "https://accounts.google.com/o/oauth2/v2/auth?client_id=id+1&response_type=code&scope=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fuserinfo.profile+https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fuserinfo.email&state={}&redirect_uri=",
                s.state
            )
        );
        assert_eq!(
            (s.code_verifier.as_str(), s.code_challenge_method),
            ("", "")
        );
        let p = configure(&json!({"name": "oidc", "clientId": "c", "authURL": "http://x/a?t=1"}))
            .unwrap();
        let s = p.start();
        assert_eq!(s.code_verifier.len(), 43);
        assert_eq!(s.code_challenge, s256_challenge(&s.code_verifier));
        assert!(
            s.auth_url
                .starts_with("http://x/a?t=1&client_id=c&code_challenge=")
        );
        assert!(s.auth_url.ends_with("&redirect_uri="));
    }

    #[test]
    fn microsofts_email_comes_from_where_id_token_email_claim_says() {
        let jwt = |claims: Value| {
            let e =
                |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
            format!("{}.{}.c2ln", e(&json!({"alg": "RS256"})), e(&claims))
        };
        let now = 1_000_000;
        let both = jwt(
            json!({"verified_primary_email": "p@x.io", "email": "e@x.io", "xms_edov": true, "iat": now}),
        );
        let edov_only = jwt(json!({"email": "e@x.io", "xms_edov": "1"}));
        let unverified = jwt(json!({"email": "e@x.io", "xms_edov": false}));
        let expired = jwt(json!({"verified_primary_email": "p@x.io", "exp": now - 3600}));
        let cases = [
            ("", &both, "mail@x.io"),
            ("unknown", &both, "mail@x.io"),
            ("any_verified", &both, "p@x.io"),
            ("any_verified", &edov_only, "e@x.io"),
            ("any_verified", &unverified, ""),
            ("verified_primary_email", &edov_only, ""),
            ("email_and_xms_edov", &both, "e@x.io"),
            ("email_and_xms_edov", &unverified, ""),
            ("email", &unverified, "e@x.io"),
            ("verified_primary_email", &expired, ""),
            ("email", &"not a token".to_owned(), ""),
        ];
        for (mode, token, want) in cases {
            assert_eq!(
                microsoft_email(mode, "mail@x.io", token, now),
                want,
                "{mode} {token}"
            );
        }
        let p = configure(&json!({"name": "microsoft", "extra": {"idTokenEmailClaim": "email"}}))
            .unwrap();
        assert_eq!(p.scopes, ["User.Read", "openid"]);
        let p = configure(&json!({"name": "microsoft"})).unwrap();
        assert_eq!(p.scopes, ["User.Read"]);
    }

    #[test]
    fn s256_is_rfc_7636s_example() {
        assert_eq!(
            s256_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn token_answers_are_read_as_json_or_form() {
        let t = Token::parse(
            "application/json",
            br#"{"access_token":"a","refresh_token":"r","id_token":"i","expires_in":60}"#,
        )
        .unwrap();
        assert_eq!((t.access_token.as_str(), t.id_token.as_str()), ("a", "i"));
        assert_eq!(t.expiry.len(), "2006-01-02 15:04:05.000Z".len());
        let t = Token::parse(
            "application/x-www-form-urlencoded; charset=utf-8",
            b"access_token=a%2Bb&scope=x+y",
        )
        .unwrap();
        assert_eq!((t.access_token.as_str(), t.expiry.as_str()), ("a+b", ""));
        assert!(matches!(
            Token::parse("application/json", b"{}"),
            Err(OAuth2Error::NoAccessToken)
        ));
        assert!(matches!(
            Token::parse("text/html", b"<html>"),
            Err(OAuth2Error::Garbage(_))
        ));
    }

    #[test]
    fn unknown_providers_are_refused() {
        assert!(matches!(
            configure(&json!({"name": "myspace"})),
            Err(OAuth2Error::UnknownProvider(_))
        ));
        for n in [
            "oidc",
            "oidc2",
            "oidc3",
            "google",
            "github",
            "gitlab",
            "microsoft",
            "apple",
            "discord",
        ] {
            assert!(defaults(n).is_some(), "{n}");
        }
    }
}
