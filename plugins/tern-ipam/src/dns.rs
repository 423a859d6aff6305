//! `resolvConf`: a resolv.conf(5) file turned into the result's DNS settings, parsed as host-local
//! parses it (`host-local/dns.go`).

use std::path::Path;

use tern_cni::Dns;

use crate::error::IpamError;

/// Parses resolv.conf text: lines are trimmed; empty lines and lines starting with `#` or `;` are
/// skipped, as are lines with fewer than two fields; `nameserver` appends its second field,
/// `domain` sets it (the last wins), `search` and `options` append every remaining field.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 2 {
            continue;
        }
        let rest = fields[1..].iter().map(|s| s.to_string());
        match fields[0] {
            "nameserver" => dns.nameservers.push(fields[1].to_owned()),
            "domain" => dns.domain = Some(fields[1].to_owned()),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

/// Reads and parses the resolv.conf at `path`.
///
/// # Errors
/// [`IpamError::ResolvConf`] when the file cannot be read.
pub fn read_resolv_conf(path: &Path) -> Result<Dns, IpamError> {
    let text = std::fs::read_to_string(path).map_err(|source| IpamError::ResolvConf {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(parse_resolv_conf(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_host_local() {
        // The fixture of host-local's dns_test.go, plus the edge cases it handles.
        let text = "nameserver 10.0.0.1\n  nameserver 10.0.0.2  \n# nameserver 10.9.9.9\n; nameserver 10.9.9.8\n\
                    domain example.com\nsearch example.com example.net\nsearch third.example\n\
                    options ndots:5 timeout:2\ndomain last.example\nnameserver\nsortlist 10.0.0.0\n";
        let d = parse_resolv_conf(text);
        assert_eq!(d.nameservers, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(d.domain.as_deref(), Some("last.example"));
        assert_eq!(d.search, ["example.com", "example.net", "third.example"]);
        assert_eq!(d.options, ["ndots:5", "timeout:2"]);
        assert!(parse_resolv_conf("# only a comment\n").is_empty());
    }

    #[test]
    fn unreadable_file_is_an_io_error() {
        let e = read_resolv_conf(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(e.to_cni().code, 5);
        assert!(e.to_string().contains("/nonexistent/resolv.conf"));
    }
}
