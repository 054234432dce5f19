//! Which URLs a webhook may point at. A webhook makes the server send requests where a user
//! says, so without a check a user could reach what only the server can: its own admin ports,
//! the private network, a cloud metadata service with credentials (server-side request
//! forgery). The check runs when a webhook is registered and again on every connection, on the
//! addresses actually connected to, so a name that later resolves elsewhere (DNS rebinding)
//! gains nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hyper::Uri;

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// How long the registration check waits for DNS.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Host names refused whatever they resolve to: the loopback names (a resolver may answer them
/// without asking DNS) and the metadata service's name (on GCP it is a link-local address that
/// the address check also refuses; the name is refused in case a resolver maps it elsewhere).
const FORBIDDEN_NAMES: &[&str] = &["localhost", "metadata.google.internal", "metadata"];

/// A webhook URL taken apart.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub https: bool,
    /// Without the brackets of an IPv6 literal, lower case, trailing dot removed.
    pub host: String,
    pub port: u16,
    /// The `Host` header value: as written in the URL (with the port when one was given).
    pub authority: String,
    /// Path and query, `/` when empty.
    pub path_and_query: String,
}

impl Target {
    /// The host as an IP address when the URL names one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// Parses a webhook URL: `http` or `https`, a host, no userinfo, no fragment, at most
/// [`MAX_URL_LEN`] characters. The message is for a 400 answer.
pub(crate) fn parse(url: &str) -> Result<Target, String> {
    if url.len() > MAX_URL_LEN {
        return Err(format!("the webhook URL is longer than {MAX_URL_LEN} characters"));
    }
    if url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
        return Err("the webhook URL contains spaces or control characters".into());
    }
    if url.contains('#') {
        return Err("the webhook URL has a fragment (#...), which is never sent".into());
    }
    let uri: Uri = url.parse().map_err(|_| "the webhook URL is not a valid absolute URL".to_string())?;
    let https = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("https") => true,
        Some("http") => false,
        Some(_) => return Err("the webhook URL must start with http:// or https://".into()),
        None => return Err("the webhook URL must be absolute (http:// or https://)".into()),
    };
    let auth = uri.authority().ok_or("the webhook URL has no host")?;
    if auth.as_str().contains('@') {
        return Err("the webhook URL must not carry a user name or password".into());
    }
    let raw_host = auth.host();
    let host = raw_host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return Err("the webhook URL has no host".into());
    }
    if raw_host.starts_with('[') && host.parse::<Ipv6Addr>().is_err() {
        return Err("the webhook URL's IPv6 address is not valid".into());
    }
    if auth.as_str().ends_with(':') || (auth.port().is_none() && auth.as_str().len() > raw_host.len()) {
        return Err("the webhook URL's port is not valid".into());
    }
    let port = auth.port_u16().unwrap_or(if https { 443 } else { 80 });
    if port == 0 {
        return Err("the webhook URL's port is not valid".into());
    }
    let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") => "/".to_string(),
        Some(p) => p.to_string(),
    };
    Ok(Target { https, host, port, authority: auth.as_str().to_string(), path_and_query })
}

/// Why an address is refused, for messages: `None` when it is a public unicast address.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    // IANA's special-purpose registry, and CGNAT (used for internal addresses by some clouds:
    // Alibaba's metadata service is 100.100.100.200).
    let table: &[([u8; 4], u32, &'static str)] = &[
        ([169, 254, 169, 254], 32, "metadata"),
        ([0, 0, 0, 0], 8, "unspecified"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "shared (CGNAT)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "special-purpose"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 88, 99, 0], 24, "special-purpose"),
        ([192, 168, 0, 0], 16, "private"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([255, 255, 255, 255], 32, "broadcast"),
        ([240, 0, 0, 0], 4, "reserved"),
    ];
    table.iter().find(|(net, bits, _)| in_v4(ip, *net, *bits)).map(|(_, _, why)| *why)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let n = u128::from(ip);
    // Forms that carry an IPv4 address are judged by that address: IPv4-mapped (::ffff:a.b.c.d,
    // which a dual-stack socket connects to over IPv4), NAT64's well-known prefix and 6to4.
    if in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) || in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return forbidden_v4(Ipv4Addr::from(n as u32));
    }
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return forbidden_v4(Ipv4Addr::from((n >> 80) as u32));
    }
    if ip == Ipv6Addr::UNSPECIFIED {
        return Some("unspecified");
    }
    if ip == Ipv6Addr::LOCALHOST {
        return Some("loopback");
    }
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Some("metadata");
    }
    let table: &[([u16; 8], u32, &'static str)] = &[
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "private (unique local)"),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
        ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
        // IETF protocol assignments, Teredo among them (its tunnel can lead anywhere).
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "special-purpose"),
    ];
    if let Some((_, _, why)) = table.iter().find(|(net, bits, _)| in_v6(ip, *net, *bits)) {
        return Some(why);
    }
    // Everything outside global unicast 2000::/3 is reserved or special (IPv4-compatible
    // ::a.b.c.d, discard-only 100::/64, local NAT64 64:ff9b:1::/48...).
    if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return Some("reserved");
    }
    None
}

fn forbidden_name(host: &str) -> bool {
    FORBIDDEN_NAMES.contains(&host) || host.ends_with(".localhost")
}

/// Resolves `t`'s host (an IP literal needs no DNS) within `timeout`. Errors are short and
/// name neither the URL nor its query.
pub(crate) async fn resolve(t: &Target, timeout: Duration) -> Result<Vec<SocketAddr>, String> {
    if let Some(ip) = t.ip() {
        return Ok(vec![SocketAddr::new(ip, t.port)]);
    }
    let found = tokio::time::timeout(timeout, tokio::net::lookup_host((t.host.as_str(), t.port)))
        .await
        .map_err(|_| "the host name did not resolve in time".to_string())?
        .map_err(|_| "the host name does not resolve".to_string())?;
    let addrs: Vec<SocketAddr> = found.collect();
    if addrs.is_empty() {
        return Err("the host name does not resolve".into());
    }
    Ok(addrs)
}

/// The first refused address among `addrs`, with the reason.
pub(crate) fn first_forbidden(addrs: &[SocketAddr]) -> Option<&'static str> {
    addrs.iter().find_map(|a| forbidden(a.ip()))
}

/// Checks a URL when a webhook is registered: `http` or `https` only, a host, no userinfo, at
/// most 2048 characters, any port. Then it resolves the host (at most 5 s) and refuses the URL
/// when any address is loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
/// (169.254/16, fe80::/10), CGNAT (100.64/10), unspecified, multicast, broadcast, reserved, a
/// documentation range, one of those in IPv4-mapped, NAT64 or 6to4 form, or a metadata address
/// (169.254.169.254, fd00:ec2::254, `metadata.google.internal`), unless `allow_private` (an
/// operator's flag; the tests set it). `Err` holds a message for a 400 answer.
///
/// Passing here does not make a later delivery safe (the name may resolve elsewhere by then):
/// [`crate::webhook::Sender::send`] checks again what it connects to.
pub async fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let t = parse(url)?;
    if allow_private {
        return Ok(());
    }
    if forbidden_name(&t.host) {
        return Err("the webhook URL names a local or metadata host, which is refused".into());
    }
    let addrs = resolve(&t, RESOLVE_TIMEOUT).await.map_err(|e| format!("the webhook URL's host: {e}"))?;
    if let Some(why) = first_forbidden(&addrs) {
        return Err(format!("the webhook URL's host is a {why} address, which is refused"));
    }
    Ok(())
}

/// The host a webhook URL names (lower case, without brackets or a trailing dot).
pub fn host_of(url: &str) -> Result<String, String> {
    parse(url).map(|t| t.host)
}

/// Whether `t`'s host name is refused before any lookup (used at send time too).
pub(crate) fn name_refused(t: &Target) -> bool {
    forbidden_name(&t.host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn parse_takes_urls_apart() {
        let t = parse("https://Hooks.Example.COM./in?x=1&token=abc").unwrap();
        assert!(t.https);
        assert_eq!(
            (t.host.as_str(), t.port, t.path_and_query.as_str()),
            ("hooks.example.com", 443, "/in?x=1&token=abc")
        );
        let t = parse("http://[2606:4700::1111]:8080").unwrap();
        assert!(!t.https);
        assert_eq!((t.host.as_str(), t.port, t.path_and_query.as_str()), ("2606:4700::1111", 8080, "/"));
        assert_eq!(t.authority, "[2606:4700::1111]:8080");
        assert_eq!(t.ip(), Some("2606:4700::1111".parse().unwrap()));
    }

    #[test]
    fn parse_refuses_malformed_urls() {
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        for bad in [
            "",
            "example.com/hook",
            "/hook",
            "ftp://example.com/",
            "file:///etc/passwd",
            "gopher://example.com/",
            "https://user:pw@example.com/",
            "https://user@example.com/",
            "https:///path",
            "https://example.com:0/",
            "https://example.com:99999/",
            "https://example.com:/",
            "https://exa mple.com/",
            "https://example.com/\n",
            "https://example.com/#frag",
            "https://[::1/",
            long.as_str(),
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse(&format!("https://example.com/{}", "a".repeat(MAX_URL_LEN - 21))).is_ok());
    }

    #[test]
    fn every_forbidden_range_is_refused() {
        let refused = [
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "192.0.0.192",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fd00:ec2::254",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "3fff::1",
            "2001::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "::127.0.0.1",
            "100::1",
        ];
        for ip in refused {
            let a: IpAddr = ip.parse().unwrap();
            assert!(forbidden(a).is_some(), "{ip} was allowed");
            let url = match a {
                IpAddr::V4(_) => format!("http://{ip}:8080/hook"),
                IpAddr::V6(_) => format!("http://[{ip}]:8080/hook"),
            };
            let e = block_on(check_url(&url, false)).expect_err(ip);
            assert!(e.contains("refused"), "{ip}: {e}");
            assert!(block_on(check_url(&url, true)).is_ok(), "{ip} with the operator's flag");
        }
        assert_eq!(forbidden("169.254.169.254".parse().unwrap()), Some("metadata"));
        assert_eq!(forbidden("::ffff:192.168.0.1".parse().unwrap()), Some("private"));
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            let a: IpAddr = ip.parse().unwrap();
            assert_eq!(forbidden(a), None, "{ip}");
        }
        // Literals need no DNS, so these run offline.
        assert_eq!(block_on(check_url("https://93.184.215.14/hooks/pfm?token=x", false)), Ok(()));
        assert_eq!(block_on(check_url("http://[2606:4700::1111]:8443/", false)), Ok(()));
        assert_eq!(block_on(check_url("https://[::ffff:8.8.8.8]/", false)), Ok(()));
    }

    #[test]
    fn local_and_metadata_names_are_refused_without_dns() {
        for url in [
            "http://localhost/",
            "http://LOCALHOST:9000/x",
            "http://localhost./",
            "http://api.localhost/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://metadata/",
        ] {
            let e = block_on(check_url(url, false)).expect_err(url);
            assert!(e.contains("refused"), "{url}: {e}");
            assert!(block_on(check_url(url, true)).is_ok(), "{url} with the operator's flag");
        }
        assert!(
            block_on(check_url("ftp://localhost/", true)).is_err(),
            "the flag does not lift the scheme rule"
        );
    }
}
