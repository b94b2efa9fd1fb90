//! Outbound HTTP for plugins: where a request may go (pb.toml's `http_allow`), decided on the
//! address that is actually dialled, not on the text of the URL.
//!
//! - An `http_allow` entry is `host:port` (`[v6]:port` for IPv6). A URL with user info, another
//!   scheme than http(s), or a host:port that no entry names is refused.
//! - A name in `http_allow` is reached at public addresses only: when it resolves to a
//!   loopback, private, link-local, shared, documentation or otherwise special address, the
//!   request is refused (a name an operator granted cannot be pointed at the host's
//!   neighbours by whoever controls its DNS). To reach such an address, grant it literally
//!   (`127.0.0.1:8080`): an IP entry admits exactly that address.
//! - The check runs again in the resolver the HTTP client dials with, on the URI it parsed,
//!   so a URL that two parsers read differently cannot slip through, and DNS is asked once.
//! - Redirects are never followed: the 3xx answer goes back to the plugin, whose next fetch is
//!   checked like any other. No proxy from the environment is used.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// The biggest response body a plugin receives.
const MAX_BODY_BYTES: u64 = 16 << 20;

/// A host in `http_allow` or in a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    fn parse(text: &str) -> Option<Self> {
        if let Some(v6) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return v6
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Self::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Some(Self::Ip(IpAddr::V4(ip)));
        }
        // Compared as written (lowercased): `name.` is another name than `name`, as far as
        // http_allow is concerned.
        let name = text.to_ascii_lowercase();
        let labels = name.strip_suffix('.').unwrap_or(&name);
        let valid = !labels.is_empty()
            && labels
                .split('.')
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        valid.then_some(Self::Name(name))
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Where a URL points: its host and port (the scheme's default when none is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    host: Host,
    port: u16,
}

impl Target {
    /// The target of a URL, read by the HTTP client's own parser.
    pub(crate) fn of(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|_| format!("not an http(s) url: {url}"))?;
        Self::of_uri(&uri).map_err(|why| format!("{why}: {url}"))
    }

    fn of_uri(uri: &Uri) -> Result<Self, String> {
        let default = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err("not an http(s) url".into()),
        };
        let authority = uri.authority().ok_or("a url without a host")?;
        if authority.as_str().contains('@') {
            return Err("a url with user info is not allowed".into());
        }
        let host = Host::parse(authority.host()).ok_or("not a valid host")?;
        let port = authority.port_u16().unwrap_or(default);
        Ok(Self { host, port })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// pb.toml's `http_allow`, parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowlist(Arc<Vec<Target>>);

/// Why an `http_allow` entry is not one: `None` when it is.
pub(crate) fn entry_problem(entry: &str) -> Option<String> {
    match parse_entry(entry) {
        Some(_) => None,
        None => Some(format!(
            "http_allow entry {entry:?} is not host:port (an IPv6 address in brackets)"
        )),
    }
}

fn parse_entry(entry: &str) -> Option<Target> {
    let (host, port) = entry.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = Host::parse(host)?;
    Some(Target { host, port })
}

impl Allowlist {
    /// Entries that do not parse admit nothing (the load refuses them: `entry_problem`).
    pub(crate) fn parse(entries: &[String]) -> Self {
        Self(Arc::new(
            entries.iter().filter_map(|e| parse_entry(e)).collect(),
        ))
    }

    pub(crate) fn admits(&self, t: &Target) -> Result<(), String> {
        if self.0.iter().any(|a| a == t) {
            Ok(())
        } else {
            Err(format!("{t} is not in http_allow"))
        }
    }
}

/// Whether an address is one a granted *name* may lead to: a public unicast address.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return public_v4(v4);
            }
            let s = v6.segments();
            // Global unicast is 2000::/3; inside it: documentation, Teredo, ORCHID, benchmarking.
            (s[0] & 0xe000) == 0x2000
                && !(s[0] == 0x2001 && s[1] == 0x0db8)
                && !(s[0] == 0x2001 && s[1] == 0x0000)
                && !(s[0] == 0x2001 && (s[1] & 0xfff0) == 0x0010)
                && !(s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0)
                && !(s[0] == 0x3fff && (s[1] & 0xf000) == 0)
        }
    }
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return Some(tail);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_unspecified()
        || o[0] == 0
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || o[0] >= 240)
}

/// The resolver the client dials with: the allowlist again, then DNS, then the addresses.
#[derive(Debug)]
struct Guarded {
    allow: Allowlist,
}

/// A refusal carried through the client's error type.
fn refusal(why: String) -> ureq::Error {
    ureq::Error::Io(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        why,
    ))
}

impl Resolver for Guarded {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let target = Target::of_uri(uri).map_err(refusal)?;
        self.allow.admits(&target).map_err(refusal)?;
        let addrs = DefaultResolver::default().resolve(uri, config, timeout)?;
        for a in addrs.iter() {
            let ok = match &target.host {
                Host::Ip(ip) => a.ip() == *ip,
                Host::Name(_) => is_public(a.ip()),
            };
            if !ok {
                return Err(refusal(format!(
                    "{} resolves to {}, which is not a public address (names in http_allow reach public addresses only; grant the address itself to reach it)",
                    target.host,
                    a.ip()
                )));
            }
        }
        Ok(addrs)
    }
}

/// What a fetch gave back.
pub(crate) struct Fetched {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a fetch gave nothing back.
pub(crate) enum FetchError {
    /// The sandbox said no.
    Refused(String),
    /// The request was allowed and failed (unreachable, timeout, bad answer).
    Failed(String),
}

fn classify(e: ureq::Error) -> FetchError {
    match e {
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
            FetchError::Refused(io.to_string())
        }
        other => FetchError::Failed(other.to_string()),
    }
}

/// One request under the sandbox, within `timeout`. Blocking: run it on a blocking thread.
pub(crate) fn fetch(
    allow: Allowlist,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout.max(Duration::from_millis(1))))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .build();
    let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), Guarded { allow });
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let req = req
        .body(body)
        .map_err(|e| FetchError::Failed(e.to_string()))?;
    let mut res = agent.run(req).map_err(classify)?;
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = res
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(classify)?;
    Ok(Fetched {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn urls_are_read_by_the_clients_parser_and_tricks_are_refused() {
        let a = allow(&["api.example.com:443", "127.0.0.1:9", "[::1]:9"]);
        for ok in [
            "https://api.example.com/v1?q",
            "https://api.example.com:443/",
            "http://127.0.0.1:9/x",
            "http://[::1]:9/",
        ] {
            let t = Target::of(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(a.admits(&t).is_ok(), "{ok}");
        }
        for bad in [
            "http://api.example.com/",
            "https://api.example.com:8443/",
            "https://api.example.com@127.0.0.1:9/",
            "https://u:p@api.example.com/",
            "http://127.0.0.1:9\\@api.example.com:443/",
            "http://127.1:9/",
            "http://2130706433:9/",
            "http://0x7f.0.0.1:9/",
            "http://[::ffff:127.0.0.1]:9/",
            "http://localhost:9/",
            "http://api.example.com.evil.test:443/",
            "https://api.example.com./v1",
            "file:///etc/passwd",
            "ftp://api.example.com:443/",
            "http://",
            "//api.example.com:443/",
            "https://api.example.com:443#@127.0.0.1:9",
        ] {
            let admitted = Target::of(bad).is_ok_and(|t| a.admits(&t).is_ok());
            // The fragment trick parses to api.example.com:443, which is granted: the request
            // goes there, and nowhere else.
            if bad.ends_with("#@127.0.0.1:9") {
                assert_eq!(Target::of(bad).unwrap().to_string(), "api.example.com:443");
                continue;
            }
            assert!(!admitted, "{bad} was admitted");
        }
    }

    #[test]
    fn allow_entries_must_be_host_and_port() {
        for ok in ["a.example:80", "127.0.0.1:9", "[::1]:9", "A.Example.:443"] {
            assert_eq!(entry_problem(ok), None, "{ok}");
        }
        for bad in [
            "a.example",
            "a.example:0",
            "a.example:http",
            "https://a.example:443",
            "a.example:443/v1",
            "u@a.example:443",
            "::1:9",
            "",
        ] {
            assert!(entry_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn only_public_unicast_addresses_are_public() {
        for private in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.2",
            "203.0.113.3",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ] {
            let ip: IpAddr = private.parse().unwrap();
            assert!(!is_public(ip), "{private} counted as public");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "::ffff:8.8.8.8",
            "2002:808:808::",
        ] {
            let ip: IpAddr = public.parse().unwrap();
            assert!(is_public(ip), "{public} counted as not public");
        }
    }

    #[test]
    fn a_granted_name_that_resolves_to_loopback_is_refused_when_dialled() {
        // `localhost` resolves to 127.0.0.1 (or ::1) on every machine, without the network.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let a = allow(&[&format!("localhost:{port}")]);
        let r = fetch(
            a,
            "GET",
            &format!("http://localhost:{port}/"),
            &[],
            Vec::new(),
            Duration::from_secs(2),
        );
        match r {
            Err(FetchError::Refused(why)) => assert!(why.contains("not a public address"), "{why}"),
            Err(FetchError::Failed(why)) => panic!("failed instead of refused: {why}"),
            Ok(_) => panic!("fetched a loopback address through a name"),
        }
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "nothing was dialled");
    }
}
