//! The resident memory of a server on this machine: the process owning the socket that
//! listens on the URI's port (from `/proc/net/tcp` and `/proc/net/tcp6`, then the
//! `socket:[INODE]` links under `/proc/*/fd`), and its `VmRSS` from `/proc/PID/status`.
//! Processes of other users cannot be inspected: then the server is simply not found.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

/// `st` column of a listening socket in `/proc/net/tcp*`.
const TCP_LISTEN_STATE: &str = "0A";

/// Bytes per KiB (`VmRSS` is given in kB, which Linux means as KiB).
const KIB_BYTES: u64 = 1024;

/// The PID of the local process listening on `addr` (`HOST:PORT`), when there is one
/// this process may inspect and the host is this machine.
pub fn find_server_pid(addr: &str) -> Option<u32> {
    let resolved: Vec<IpAddr> = addr.to_socket_addrs().ok()?.map(|a| a.ip()).collect();
    let port = addr.rsplit_once(':')?.1.parse::<u16>().ok()?;
    let inode = listening_inode(&resolved, port)?;
    owner_of_inode(inode)
}

/// The resident set size of `pid` in bytes, while it runs.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * KIB_BYTES)
}

/// The inode of a listening socket on `port` whose address is one of `resolved`, or the
/// wildcard address when `resolved` holds a loopback address (a wildcard listener on a
/// remote host's port says nothing about that host).
fn listening_inode(resolved: &[IpAddr], port: u16) -> Option<u64> {
    let loopback = resolved.iter().any(|ip| ip.is_loopback());
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let Some((ip, p, state, inode)) = parse_tcp_line(line) else {
                continue;
            };
            if state != TCP_LISTEN_STATE || p != port {
                continue;
            }
            if resolved.contains(&ip) || (ip.is_unspecified() && loopback) {
                return Some(inode);
            }
        }
    }
    None
}

/// Local address, port, state and inode of one `/proc/net/tcp*` line.
fn parse_tcp_line(line: &str) -> Option<(IpAddr, u16, &str, u64)> {
    let cols: Vec<&str> = line.split_whitespace().collect();
    let (ip_hex, port_hex) = cols.get(1)?.split_once(':')?;
    let state = *cols.get(3)?;
    let inode = cols.get(9)?.parse().ok()?;
    let port = u16::from_str_radix(port_hex, 16).ok()?;
    Some((parse_hex_ip(ip_hex)?, port, state, inode))
}

/// An address as the kernel prints it: 32-bit words in hex, each in host byte order.
fn parse_hex_ip(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            let v6 = Ipv6Addr::from(b);
            // A v4 client reaching a dual-stack listener sees it as ::ffff:a.b.c.d.
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// The process with a file descriptor on socket `inode`.
fn owner_of_inode(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_hex_addresses() {
        let v4 = parse_hex_ip(&format!("{:08X}", u32::from_ne_bytes([127, 0, 0, 1]))).unwrap();
        assert_eq!(v4, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            parse_hex_ip("00000000000000000000000000000000").unwrap(),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        );
    }

    #[test]
    fn finds_a_listener_in_this_process() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        assert_eq!(find_server_pid(&addr), Some(std::process::id()));
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }
}
