//! Where an action leads: URLs parsed as the browser parses them (WHATWG, the `url` crate) and
//! sites compared by registrable domain (the public-suffix list, the `psl` crate).

use url::Url;

/// An http(s) URL as the browser would parse it, relative ones resolved against `base`.
/// `None` for anything else (`javascript:`, `data:`, unparsable text).
pub fn web_url(text: &str, base: Option<&str>) -> Option<Url> {
    let base = base.and_then(|b| Url::parse(b).ok());
    let url = Url::options().base_url(base.as_ref()).parse(text).ok()?;
    matches!(url.scheme(), "http" | "https").then_some(url)
}

/// The host of an http(s) URL, lower case, without port or credentials (as the browser sees it:
/// `https://evil.test\@good.test/` is on evil.test).
pub fn host_of(url: &str) -> Option<String> {
    let url = web_url(url, None)?;
    url.host_str().map(|h| h.trim_end_matches('.').to_owned()).filter(|h| !h.is_empty())
}

/// The site of a host: its registrable domain by the public-suffix list (`www.bbc.co.uk` →
/// `bbc.co.uk`, `user.github.io` stays whole), or the host itself for IP addresses, `localhost`
/// and names that are a public suffix.
pub fn site_of(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_ok() {
        return host.to_owned();
    }
    psl::domain_str(host).map_or_else(|| host.to_owned(), str::to_owned)
}

/// Whether the port tells two sites apart on this host (IP addresses and `localhost`).
fn sited_by_port(site: &str) -> bool {
    site.parse::<std::net::IpAddr>().is_ok() || site == "localhost" || site.ends_with(".localhost")
}

/// The host a card and a grant name for a destination: the host, and for IP addresses and
/// `localhost` its port too (`127.0.0.1:8080`), so that an approval of one local server is never
/// an approval of another on the same machine. The worker reads it back with the same rule
/// (extension/src/worker/site.ts `approvedSite`).
pub fn host_for_site(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default().trim_end_matches('.');
    match url.port_or_known_default() {
        Some(port) if sited_by_port(&site_of(host)) => format!("{host}:{port}"),
        _ => host.to_owned(),
    }
}

/// The site of a URL: its scheme and the site of its host (see [`site_of`]), and for IP
/// addresses and `localhost` the port too (nothing else tells two servers on one machine apart:
/// `http://localhost:8080` and `http://localhost:9000` are two sites). `None` when it is not an
/// http(s) URL with a host. This is how a card names where an action leads.
pub fn site_of_url(url: &Url) -> Option<String> {
    let host = url.host_str().filter(|h| !h.is_empty())?;
    let site = site_of(host);
    let port =
        url.port_or_known_default().filter(|_| sited_by_port(&site)).map(|p| format!(":{p}")).unwrap_or_default();
    // An IPv6 address keeps its brackets, as in an address (`http://[::1]:5000`).
    let site = if site.contains(':') { format!("[{site}]") } else { site };
    Some(format!("{}://{site}{port}", url.scheme()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table the worker's twin (extension/src/worker/site.ts) is tested against too
    /// (extension/tests/unit/site.test.mjs): one rule on both sides of the boundary.
    #[test]
    fn the_shared_site_table() {
        #[derive(serde::Deserialize)]
        struct Case {
            url: String,
            site: Option<String>,
            host: Option<String>,
        }
        let cases: Vec<Case> = serde_json::from_str(include_str!("site-cases.json")).expect("site-cases.json parses");
        assert!(cases.len() >= 20);
        for case in cases {
            let url = web_url(&case.url, None);
            assert_eq!(url.as_ref().and_then(site_of_url), case.site, "site of {}", case.url);
            assert_eq!(url.as_ref().map(host_for_site), case.host, "host named for {}", case.url);
        }
    }

    #[test]
    fn hosts_as_the_browser_parses_them() {
        assert_eq!(host_of("https://user:pw@Shop.Test:8080/a?b").as_deref(), Some("shop.test"));
        // WHATWG: a backslash is a slash in special schemes, so the host ends before it.
        assert_eq!(host_of("https://evil.test\\@good.test/").as_deref(), Some("evil.test"));
        assert_eq!(host_of("  https://EVIL.test./x").as_deref(), Some("evil.test"));
        assert_eq!(host_of("https://good.test@evil.test/").as_deref(), Some("evil.test"));
        assert_eq!(host_of("https://xn--80ak6aa92e.com/").as_deref(), Some("xn--80ak6aa92e.com"));
        assert_eq!(host_of("https://аpple.com/").as_deref(), Some("xn--pple-43d.com"));
        assert_eq!(host_of("javascript:alert(1)"), None);
        assert_eq!(host_of("data:text/html,hi"), None);
        assert_eq!(host_of("/relative"), None);
    }

    #[test]
    fn relative_urls_resolve_against_the_page() {
        let page = Some("https://shop.test/cart/");
        assert_eq!(web_url("../pay", page).unwrap().as_str(), "https://shop.test/pay");
        assert_eq!(web_url("//evil.test/x", page).unwrap().host_str(), Some("evil.test"));
        assert!(web_url("javascript:void 0", page).is_none());
    }

    #[test]
    fn sites_of_urls_tell_schemes_and_local_ports_apart() {
        let site = |u: &str| site_of_url(&web_url(u, None).unwrap());
        assert_eq!(site("https://a.example.com/x"), site("https://b.example.com:8443/y"));
        assert_ne!(site("https://example.com/"), site("http://example.com/"));
        // Two servers on one machine are two sites; the default port is the same as none.
        assert_ne!(site("http://localhost:8080/"), site("http://localhost:9000/"));
        assert_ne!(site("http://127.0.0.1:8080/"), site("http://127.0.0.1:9000/"));
        assert_eq!(site("http://127.0.0.1/"), site("http://127.0.0.1:80/"));
        assert_ne!(site("http://[::1]:1/"), site("http://[::1]:2/"));
        assert_eq!(site("http://localhost:8080/a").as_deref(), Some("http://localhost:8080"));
    }

    #[test]
    fn sites_by_the_public_suffix_list() {
        assert_eq!(site_of("a.b.example.com"), "example.com");
        assert_eq!(site_of("www.bbc.co.uk"), "bbc.co.uk");
        // Private suffixes: two users of github.io are two sites.
        assert_ne!(site_of("alice.github.io"), site_of("mallory.github.io"));
        assert_eq!(site_of("shop.example.com.au"), "example.com.au");
        assert_eq!(site_of("127.0.0.1"), "127.0.0.1");
        assert_eq!(site_of("localhost"), "localhost");
        assert_eq!(site_of("[::1]"), "::1");
    }
}
