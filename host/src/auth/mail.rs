//! Outgoing mail: a message as PocketBase sends one (an HTML part and a plain-text part made from
//! it, the sender from `settings.meta`), delivered over SMTP (lettre on tokio, rustls) as
//! `settings.smtp` says, off the request path through a bounded queue with retries.
//!
//! With SMTP not enabled the message is written to the log instead, clearly marked, as a
//! development aid (PocketBase would try the machine's `sendmail`).

use crate::settings::{Settings, Smtp};
use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::sync::Arc;
use std::time::Duration;

/// How many mails may wait to be sent; past it a new mail is dropped (and logged), so a flood of
/// requests cannot grow memory without bound.
pub(crate) const QUEUE_LEN: usize = 1024;
/// Attempts per mail before it is given up (and logged).
const ATTEMPTS: u32 = 3;
/// A whole SMTP exchange may take this long.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// One mail to send.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub from_name: String,
    pub from_address: String,
    pub to: String,
    pub subject: String,
    pub html: String,
}

impl Message {
    /// A message from the configured sender (`meta.senderName` / `meta.senderAddress`).
    pub(crate) fn from_sender(
        settings: &Settings,
        to: &str,
        subject: String,
        html: String,
    ) -> Self {
        Self {
            from_name: settings.meta.sender_name.clone(),
            from_address: settings.meta.sender_address.clone(),
            to: to.to_owned(),
            subject,
            html,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MailError {
    #[error("invalid address {0:?}")]
    Address(String),
    #[error("{0}")]
    Build(String),
    #[error("{0}")]
    Smtp(String),
    #[error("the SMTP exchange timed out")]
    Timeout,
}

/// Send one message now, as `smtp` says (the caller decides what "now" costs it). Used by the
/// queue's worker and by the settings' test mail, whose answer is the send's outcome.
pub(crate) async fn send(smtp: &Smtp, msg: &Message) -> Result<(), MailError> {
    if !smtp.enabled {
        log_unsent(msg);
        return Ok(());
    }
    let email = build(msg)?;
    let transport = transport(smtp)?;
    match tokio::time::timeout(SEND_TIMEOUT, transport.send(email)).await {
        Err(_) => Err(MailError::Timeout),
        Ok(Err(e)) => Err(MailError::Smtp(e.to_string())),
        Ok(Ok(_)) => Ok(()),
    }
}

fn log_unsent(msg: &Message) {
    tracing::info!(
        to = %msg.to,
        subject = %msg.subject,
        text = %html_to_text(&msg.html),
        "MAIL NOT SENT (settings.smtp is not enabled): the message follows"
    );
}

fn mailbox(name: &str, address: &str) -> Result<Mailbox, MailError> {
    let addr = address
        .parse()
        .map_err(|_| MailError::Address(address.to_owned()))?;
    Ok(Mailbox::new(
        (!name.is_empty()).then(|| name.to_owned()),
        addr,
    ))
}

fn build(msg: &Message) -> Result<lettre::Message, MailError> {
    // A Message-ID under the sender's domain, as PocketBase adds one.
    let domain = msg
        .from_address
        .rsplit_once('@')
        .map(|(_, d)| d)
        .unwrap_or("localhost");
    lettre::Message::builder()
        .from(mailbox(&msg.from_name, &msg.from_address)?)
        .to(mailbox("", &msg.to)?)
        .subject(msg.subject.clone())
        .message_id(Some(format!(
            "<{}@{domain}>",
            crate::schema::ids::secret(15)
        )))
        .multipart(
            MultiPart::alternative()
                .singlepart(SinglePart::plain(html_to_text(&msg.html)))
                .singlepart(SinglePart::html(msg.html.clone())),
        )
        .map_err(|e| MailError::Build(e.to_string()))
}

/// The SMTP client PocketBase's settings describe: `tls` is TLS from the first byte (SMTPS);
/// otherwise STARTTLS when the server offers it (Go's client does the same). Credentials only
/// when a username or password is set, by `authMethod` (`LOGIN`, else `PLAIN`), and only over
/// TLS or to localhost; `localName` for EHLO ("localhost" when empty).
fn transport(smtp: &Smtp) -> Result<AsyncSmtpTransport<Tokio1Executor>, MailError> {
    let params =
        TlsParameters::new(smtp.host.clone()).map_err(|e| MailError::Smtp(e.to_string()))?;
    let port = u16::try_from(smtp.port).map_err(|_| MailError::Smtp("invalid port".into()))?;
    let credentials = !smtp.username.is_empty() || !smtp.password.is_empty();
    // Credentials travel only encrypted, or to this machine (Go's SMTP auth refuses otherwise):
    // without `tls`, STARTTLS becomes required rather than opportunistic.
    let local = matches!(smtp.host.as_str(), "localhost" | "127.0.0.1" | "::1");
    let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.as_str())
        .port(port)
        .timeout(Some(SEND_TIMEOUT))
        .tls(if smtp.tls {
            Tls::Wrapper(params)
        } else if credentials && !local {
            Tls::Required(params)
        } else {
            Tls::Opportunistic(params)
        })
        .hello_name(ClientId::Domain(if smtp.local_name.is_empty() {
            "localhost".into()
        } else {
            smtp.local_name.clone()
        }));
    if credentials {
        let mechanism = if smtp.auth_method == "LOGIN" {
            Mechanism::Login
        } else {
            Mechanism::Plain
        };
        b = b
            .credentials(Credentials::new(
                smtp.username.clone(),
                smtp.password.clone(),
            ))
            .authentication(vec![mechanism]);
    }
    Ok(b.build())
}

/// The queue mails wait in while the request that made them has already been answered.
pub(crate) struct Outbox {
    tx: tokio::sync::mpsc::Sender<Job>,
}

/// Called when a mail is given up (its OTP, say, is then of no use).
pub(crate) type OnGivenUp = Box<dyn FnOnce() + Send>;

/// A mail in the outbox: counted in the queue's gauge from queued until sent or given up.
struct Job {
    settings: Arc<Settings>,
    msg: Message,
    on_given_up: Option<OnGivenUp>,
}

impl Drop for Job {
    fn drop(&mut self) {
        crate::metrics::MAIL_QUEUE.dec();
    }
}

impl Outbox {
    /// Start the worker on the current runtime. Mails go one at a time, in order: a slow SMTP
    /// server slows mail, never a response.
    pub(crate) fn start() -> Arc<Self> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Job>(QUEUE_LEN);
        tokio::spawn(async move {
            while let Some(mut job) = rx.recv().await {
                if deliver(&job.settings.smtp, &job.msg).await {
                    crate::metrics::MAIL_SENT.inc();
                } else {
                    crate::metrics::MAIL_FAILED.inc();
                    if let Some(f) = job.on_given_up.take() {
                        f();
                    }
                }
            }
        });
        Arc::new(Self { tx })
    }

    /// Queue `msg`, to be sent with the settings in effect now (`settings`). Never waits.
    /// `on_given_up` runs when the mail cannot be sent (or queued).
    pub(crate) fn queue(
        &self,
        settings: Arc<Settings>,
        msg: Message,
        on_given_up: Option<OnGivenUp>,
    ) {
        crate::metrics::MAIL_QUEUE.inc();
        let job = Job {
            settings,
            msg,
            on_given_up,
        };
        if let Err(e) = self.tx.try_send(job) {
            let mut job = e.into_inner();
            tracing::error!(to = %job.msg.to, subject = %job.msg.subject, "mail queue full or closed: mail dropped");
            crate::metrics::MAIL_FAILED.inc();
            if let Some(f) = job.on_given_up.take() {
                f();
            }
        }
    }
}

/// True once sent; false when given up.
async fn deliver(smtp: &Smtp, msg: &Message) -> bool {
    for attempt in 1..=ATTEMPTS {
        match send(smtp, msg).await {
            Ok(()) => return true,
            // A message that cannot be built will not build next time either.
            Err(e @ (MailError::Address(_) | MailError::Build(_))) => {
                tracing::error!(to = %msg.to, subject = %msg.subject, error = %e, "mail not sendable");
                return false;
            }
            Err(e) => {
                tracing::warn!(to = %msg.to, subject = %msg.subject, attempt, error = %e, "mail send failed");
                if attempt < ATTEMPTS {
                    tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
                }
            }
        }
    }
    tracing::error!(to = %msg.to, subject = %msg.subject, "mail given up after {ATTEMPTS} attempts");
    false
}

/// The plain-text part of a mail, made from its HTML with PocketBase's rules: the contents of
/// `<style>`, `<script>` and similar skipped, runs of whitespace collapsed, a line break before
/// each block element and at each `<br>`, list items prefixed with "- ", links written as
/// `[text](href)`.
pub(crate) fn html_to_text(html: &str) -> String {
    const SKIP: &[&str] = &[
        "style", "script", "iframe", "applet", "object", "svg", "img", "button", "form",
        "textarea", "input", "select", "option", "template", "head",
    ];
    const INLINE: &[&str] = &[
        "a", "span", "small", "strike", "strong", "sub", "sup", "em", "b", "u", "i",
    ];
    let mut out = String::new();
    // While inside a link, its text goes here; the link is written when it closes.
    let mut link: Option<(String, String)> = None;
    let mut can_break = false;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            push_text(rest, &mut out, &mut link, &mut can_break);
            break;
        };
        push_text(&rest[..lt], &mut out, &mut link, &mut can_break);
        rest = &rest[lt..];
        let Some(gt) = rest.find('>') else { break };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if tag.starts_with('!') || tag.starts_with('?') {
            continue;
        }
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if !closing && SKIP.contains(&name.as_str()) {
            let end = format!("</{name}");
            match rest.to_ascii_lowercase().find(&end) {
                Some(i) => {
                    rest = &rest[i..];
                    if let Some(g) = rest.find('>') {
                        rest = &rest[g + 1..];
                    }
                }
                None => rest = "",
            }
            continue;
        }
        if name == "a" {
            if closing {
                if let Some((text, href)) = link.take() {
                    let text = text.trim();
                    out.push('[');
                    out.push_str(if text.is_empty() { "LINK" } else { text });
                    out.push(']');
                    if !href.is_empty() {
                        out.push('(');
                        out.push_str(&href);
                        out.push(')');
                    }
                }
            } else {
                link = Some((String::new(), attr(tag, "href")));
            }
            continue;
        }
        if closing {
            continue;
        }
        let target = match link.as_mut() {
            Some((t, _)) => t,
            None => &mut out,
        };
        // A <br> always breaks the line; a block element only after some text.
        if name == "br" || (can_break && !INLINE.contains(&name.as_str())) {
            target.push_str("\r\n");
            can_break = false;
        }
        if name == "li" {
            target.push_str("- ");
        }
    }
    out.trim().to_owned()
}

fn push_text(
    raw: &str,
    out: &mut String,
    link: &mut Option<(String, String)>,
    can_break: &mut bool,
) {
    let decoded = decode_entities(raw);
    let mut txt = String::with_capacity(decoded.len());
    let mut space = false;
    for ch in decoded.chars() {
        if ch.is_whitespace() {
            if !space {
                txt.push(' ');
            }
            space = true;
        } else {
            txt.push(ch);
            space = false;
        }
    }
    let txt = if *can_break {
        txt.as_str()
    } else {
        txt.trim_start_matches(' ')
    };
    if txt.is_empty() {
        return;
    }
    match link.as_mut() {
        Some((t, _)) => t.push_str(txt),
        None => out.push_str(txt),
    }
    *can_break = true;
}

fn attr(tag: &str, name: &str) -> String {
    let lower = tag.to_ascii_lowercase();
    let Some(i) = lower.find(&format!("{name}=")) else {
        return String::new();
    };
    let v = &tag[i + name.len() + 1..];
    let value = match v.chars().next() {
        Some(q @ ('"' | '\'')) => v[1..].split(q).next().unwrap_or(""),
        _ => v.split(char::is_whitespace).next().unwrap_or(""),
    };
    decode_entities(value)
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_text_with_links_and_breaks() {
        let html = "<html><head><style>p{}</style></head><body>\n<p>Hello,</p>\n<p>Click <a class=\"btn\" href=\"http://x/_/#/auth/a/T\">Verify</a> now.</p>\n<p>\n  Thanks,<br/>\n  App team\n</p></body></html>";
        assert_eq!(
            html_to_text(html),
            // Whitespace between blocks stays a trailing space, as in PocketBase's conversion.
            "Hello, \r\nClick [Verify](http://x/_/#/auth/a/T) now. \r\nThanks,\r\nApp team"
        );
        assert_eq!(
            html_to_text("<p>Your code: <strong>123</strong></p>"),
            "Your code: 123"
        );
        assert_eq!(
            html_to_text("<ul><li>a</li><li>b &amp; c</li></ul>"),
            "- a\r\n- b & c"
        );
    }

    #[test]
    fn a_message_has_the_sender_a_plain_and_an_html_part() {
        let m = Message {
            from_name: "Acme Mailer".into(),
            from_address: "noreply@acme.test".into(),
            to: "a@b.test".into(),
            subject: "Hi".into(),
            html: "<p>Hello</p>".into(),
        };
        let raw = String::from_utf8(build(&m).unwrap().formatted()).unwrap();
        assert!(raw.contains("Acme Mailer"), "{raw}");
        assert!(raw.contains("<noreply@acme.test>"), "{raw}");
        assert!(raw.contains("Message-ID: <"), "{raw}");
        assert!(raw.contains("@acme.test>"), "{raw}");
        assert!(raw.contains("text/plain"), "{raw}");
        assert!(raw.contains("text/html"), "{raw}");
        let bad = Message {
            to: "not an address".into(),
            ..m
        };
        assert!(matches!(build(&bad), Err(MailError::Address(_))));
    }
}
