//! Owns OAuth2's outbound HTTP: one request per connection (HTTP/1.1, plain or through rustls
//! with ring and the Mozilla roots), under a deadline and a body limit, optionally refusing
//! private and loopback addresses (the avatar download, as PocketBase guards it). Hands out no
//! hyper types.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

/// The largest provider answer read (token, user info, keys); an avatar's limit is its own.
pub(crate) const BODY_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("invalid url {0:?}")]
    Url(String),
    #[error("address of {0:?} is invalid or resolves to a disallowed IP")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Http(String),
}

/// A response: its status, content type and body.
pub(crate) struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
}

/// One outbound request.
pub(crate) struct Outbound<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    /// Refuse loopback, private, link-local, multicast and unspecified addresses.
    pub public_only: bool,
    pub timeout: Duration,
    pub body_bytes_max: usize,
}

impl<'a> Outbound<'a> {
    pub(crate) fn get(url: &'a str) -> Self {
        Outbound {
            method: "GET",
            url,
            headers: Vec::new(),
            body: Vec::new(),
            public_only: false,
            timeout: Duration::from_secs(30),
            body_bytes_max: BODY_BYTES_MAX,
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// Send `req` and read its whole answer, all within its deadline.
pub(crate) async fn fetch(req: Outbound<'_>) -> Result<Reply, FetchError> {
    let limit = req.timeout;
    tokio::time::timeout(limit, fetch_now(req))
        .await
        .map_err(|_| FetchError::Timeout(limit))?
}

async fn fetch_now(req: Outbound<'_>) -> Result<Reply, FetchError> {
    let bad_url = || FetchError::Url(req.url.to_owned());
    let uri: hyper::Uri = req.url.parse().map_err(|_| bad_url())?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(bad_url()),
    };
    let host = uri.host().ok_or_else(bad_url)?.to_owned();
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare.as_str(), port))
        .await?
        .collect();
    let addr = addrs
        .into_iter()
        .find(|a| !req.public_only || is_public(a.ip()))
        .ok_or_else(|| FetchError::Refused(req.url.to_owned()))?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or(&host);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut rb = hyper::Request::builder()
        .method(req.method)
        .uri(path)
        .header("host", authority)
        .header(
            "user-agent",
            concat!("ferrobase/", env!("CARGO_PKG_VERSION")),
        );
    for (k, v) in &req.headers {
        rb = rb.header(*k, v);
    }
    let request = rb
        .body(Full::new(Bytes::from(req.body)))
        .map_err(|e| FetchError::Http(e.to_string()))?;
    if tls {
        let name = rustls::pki_types::ServerName::try_from(bare).map_err(|_| bad_url())?;
        let stream =
            tokio_rustls::TlsConnector::from(crate::http::client_tls().map_err(FetchError::Http)?)
                .connect(name, tcp)
                .await?;
        send(stream, request, req.body_bytes_max).await
    } else {
        send(tcp, request, req.body_bytes_max).await
    }
}

async fn send<S>(
    stream: S,
    request: hyper::Request<Full<Bytes>>,
    body_bytes_max: usize,
) -> Result<Reply, FetchError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http = |e: hyper::Error| FetchError::Http(e.to_string());
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(http)?;
    // The connection ends with this request: its task ends once the body is read or dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let res = sender.send_request(request).await.map_err(http)?;
    let status = res.status().as_u16();
    let content_type = res
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = Limited::new(res.into_body(), body_bytes_max)
        .collect()
        .await
        .map_err(|e| FetchError::Http(e.to_string()))?
        .to_bytes();
    Ok(Reply {
        status,
        content_type,
        body,
    })
}

/// An address a download may reach (PocketBase's avatar client refuses the rest).
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast())
        }
        IpAddr::V6(v6) => {
            let seg0 = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg0 & 0xfe00) == 0xfc00
                || (seg0 & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| !is_public(IpAddr::V4(v4))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass_the_download_check() {
        for (ip, public) in [
            ("127.0.0.1", false),
            ("10.1.2.3", false),
            ("192.168.0.1", false),
            ("169.254.1.1", false),
            ("0.0.0.0", false),
            ("::1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("::ffff:127.0.0.1", false),
            ("8.8.8.8", true),
            ("2606:4700::1111", true),
        ] {
            assert_eq!(is_public(ip.parse().unwrap()), public, "{ip}");
        }
    }
}
