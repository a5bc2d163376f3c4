//! What a host tells of itself for the Network-division system description:
//! its network interfaces (from `getifaddrs` and `/sys/class/net`), OS and
//! kernel. Both ends use it: the sut-node in its `Describe` reply, the
//! LoadGen node for the interface behind each of its connections.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use proto::Nic;

/// Every network interface with its addresses, in name order.
pub fn nics() -> Vec<Nic> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, addr) in interface_addresses() {
        by_name.entry(name).or_default().push(addr.to_string());
    }
    // Interfaces without an address still exist in sysfs.
    if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
        for e in dir.flatten() {
            by_name
                .entry(e.file_name().to_string_lossy().into_owned())
                .or_default();
        }
    }
    by_name
        .into_iter()
        .map(|(name, addresses)| nic(&name, addresses))
        .collect()
}

/// The interface that holds address `ip`, if any.
pub fn nic_with_address<'a>(nics: &'a [Nic], ip: &IpAddr) -> Option<&'a Nic> {
    let ip = ip.to_string();
    nics.iter().find(|n| n.addresses.contains(&ip))
}

fn sys(name: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(name).join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

fn nic(name: &str, addresses: Vec<String>) -> Nic {
    let driver = std::fs::read_link(Path::new("/sys/class/net").join(name).join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // Reading `speed` fails (or gives -1) for loopback and links that are down.
    let speed_mbps = sys(name, "speed")
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(0) as u64;
    let link_type = match sys(name, "type").as_deref() {
        Some("1") => "ether".to_string(),
        Some("772") => "loopback".to_string(),
        Some("32") => "infiniband".to_string(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Nic {
        name: name.to_string(),
        driver,
        speed_mbps,
        mtu: sys(name, "mtu").and_then(|s| s.parse().ok()).unwrap_or(0),
        addresses,
        link_type,
    }
}

/// (interface name, IP address) of every address of the host.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that we read and free
    // with freeifaddrs; every pointer is checked for null before use.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let ip = match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr))
                }
                _ => continue,
            };
            out.push((name, ip));
        }
        libc::freeifaddrs(head);
    }
    out
}

/// This machine's host name; "sut-node" where it has none that is UTF-8.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // within it (or truncates), and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_string(),
        _ => "sut-node".to_string(),
    }
}

/// The OS's name from /etc/os-release, e.g. "Debian GNU/Linux 13 (trixie)".
pub fn os_name() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string())
}

/// The kernel, e.g. "Linux 6.12.0-amd64".
pub fn kernel() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("Linux {release}").trim().to_string()
}

/// The current Unix time in nanoseconds.
pub fn unix_time_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_by_its_address() {
        let nics = nics();
        let lo = nic_with_address(&nics, &IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("loopback");
        assert_eq!(lo.link_type, "loopback");
        assert!(lo.mtu > 0);
        assert_eq!(lo.speed_mbps, 0);
        assert!(kernel().starts_with("Linux "));
        assert!(!os_name().is_empty());
    }
}
