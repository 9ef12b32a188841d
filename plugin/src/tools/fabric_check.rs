//! `roce-ipvlan fabric-check`: for two pods on two nodes, which rails work and, for each one
//! that does not, why.
//!
//! ```text
//! roce-ipvlan fabric-check serve [--port PORT]                 in the peer pod, until killed
//! roce-ipvlan fabric-check PEER [--port PORT] [--json] [--no-rdma]   in this pod
//! ```
//!
//! PEER is the peer pod's address on the pod network (what `kubectl get pod -o wide` shows), or a
//! name that resolves to it (a headless Service's).
//! Both pods find their rails as `env` does (the children whose ifalias ADD wrote) and are
//! paired by interface name (both attach the same networks, so net1 faces net1). For each pair
//! the checks run in this order, and the first that fails is the rail's reason:
//!
//! 1. **gid**: each side's GID is at the index its ifalias names, as that pod sees its table
//!    (DOCA-OFED shows a pod zeros for GIDs of netdevs in other namespaces);
//! 2. **route**: this pod's kernel sends the peer's rail address, from this child's address,
//!    out of this child (`ip route get PEER from HERE`);
//! 3. **reach**: a TCP connection from this child's address to the peer's rail address is
//!    answered, and the peer saw it come from this child's address;
//! 4. **arp**: this child's neighbour entry for the peer (its rail address, or the gateway on a
//!    routed rail) holds the MAC of the peer's child on the same rail, not another rail's (ARP
//!    flux: a node answering on every rail for every address);
//! 5. **rdma**: `ibv_rc_pingpong` between the two children's RDMA devices at their GID indexes,
//!    when both pods have it on PATH (`--no-rdma` skips it): a QP that cannot move to RTR is
//!    the report's symptom (the GID index is not one the pod may use).
//!
//! The pods talk over TCP, one JSON object per line: on the pod network (the list of rails;
//! ibv_rc_pingpong's own exchange of QP numbers and GIDs, as NCCL's bootstrap) and on each rail
//! (reach, and the request that starts the peer's ibv_rc_pingpong server).
//!
//! Exit status: 0 every rail works, 1 a rail does not (the table says which and why), 2 the check
//! could not run (bad arguments, no rails here, the peer not answering on the pod network).

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use std::{fs, io, thread};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::kernel::netlink::RouteSocket;
use crate::protocol::cni::Roce;
use crate::tools::cli::{self, Long, Parsed, Short, Value as Arg};

const USAGE: &str = "\
usage: roce-ipvlan fabric-check serve [--port PORT]
       roce-ipvlan fabric-check PEER [--port PORT] [--json] [--no-rdma]

Run `serve` in one pod and `PEER` (the serving pod's address on the pod network, or a name
that resolves to it) in another,
on another node, both attached to the same roce-ipvlan networks. For each rail (children
paired by interface name) it checks, in order: each side's GID visible at its reported index,
the route from this child to the peer's rail address, TCP over the rail, the ARP/ND answer
coming from the peer's child on that rail, and RDMA (ibv_rc_pingpong at the reported GID
indexes, when both pods have it). The first failing check is the rail's reason.

  --port PORT  the TCP port `serve` listens on (default 18720); RDMA uses the ports above it
  --json       one JSON document instead of the table
  --no-rdma    skip the RDMA check

Exit status: 0 every rail works, 1 a rail does not, 2 the check could not run.
";

const DEFAULT_PORT: u16 = 18720;
const PINGPONG: &str = "ibv_rc_pingpong";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq)]
enum Args {
    Serve {
        port: u16,
    },
    Check {
        /// An address or a name (a headless Service's) of the serving pod on the pod network.
        peer: String,
        port: u16,
        json: bool,
        rdma: bool,
    },
}

fn parse_args(args: &[String]) -> cli::Outcome<Args> {
    cli::parse(args, |p| {
        let mut positional: Vec<String> = Vec::new();
        let (mut port, mut json, mut rdma) = (DEFAULT_PORT, false, true);
        while let Some(arg) = p.next()? {
            match arg {
                Short('h') | Long("help") => return Ok(Parsed::Help),
                Long("port") => port = cli::parsed(p, "--port")?,
                Long("json") => json = true,
                Long("no-rdma") => rdma = false,
                Arg(v) => positional.push(v.to_string_lossy().into_owned()),
                arg => return Err(cli::unexpected(arg)),
            }
        }
        match positional.as_slice() {
            [serve] if serve == "serve" => Ok(Parsed::Run(Args::Serve { port })),
            [peer] => Ok(Parsed::Run(Args::Check {
                peer: peer.clone(),
                port,
                json,
                rdma,
            })),
            [] => Err(cli::Error::new(
                "give `serve` or the serving pod's address (PEER)",
            )),
            _ => Err(cli::Error::new("give one of `serve` and PEER")),
        }
    })
}

/// Entry point of the subcommand; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    let args = match parse_args(args) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("roce-ipvlan fabric-check: {e}\n\n{USAGE}");
            return cli::USAGE_EXIT;
        }
    };
    let result = match args {
        Args::Serve { port } => serve(port).map(|()| 0),
        Args::Check {
            peer,
            port,
            json,
            rdma,
        } => check(peer, port, json, rdma),
    };
    result.unwrap_or_else(|e| {
        eprintln!("roce-ipvlan fabric-check: {e}");
        2
    })
}

// --- what each pod knows about its rails --------------------------------------------------

/// One child of this pod, as the peer learns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rail {
    interface: String,
    #[serde(skip)]
    ifindex: u32,
    mac: String,
    address: IpAddr,
    rdma_device: String,
    port: u32,
    gid_index: u32,
    gid: Ipv6Addr,
    /// Why the GID is not usable from this pod, if it is not.
    gid_problem: Option<String>,
}

/// The rails of the calling process's namespace, read from `sys` (/sys): every interface whose
/// ifalias ADD wrote, in interface-name order, each with its GID checked against the table.
fn rails(sys: &Path) -> io::Result<Vec<Rail>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(sys.join("class/net"))? {
        let entry = entry?;
        let interface = entry.file_name().to_string_lossy().into_owned();
        let read = |f: &str| fs::read_to_string(entry.path().join(f)).map(|s| s.trim().to_string());
        let Some(roce) = read("ifalias").ok().and_then(|a| Roce::from_ifalias(&a)) else {
            continue;
        };
        let gid_problem = gid_problem(sys, &roce);
        out.push(Rail {
            ifindex: read("ifindex")
                .ok()
                .and_then(|i| i.parse().ok())
                .unwrap_or(0),
            mac: read("address").unwrap_or_default(),
            address: address_of(roce.gid),
            interface,
            rdma_device: roce.rdma_device,
            port: roce.port,
            gid_index: roce.gid_index,
            gid: roce.gid,
            gid_problem,
        });
    }
    out.sort_by(|a, b| a.interface.cmp(&b.interface));
    Ok(out)
}

/// The IP address a RoCE v2 GID stands for (IPv4-mapped for an IPv4 address).
fn address_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// Why the GID the ifalias names is not in this namespace's view of the table, if it is not.
fn gid_problem(sys: &Path, roce: &Roce) -> Option<String> {
    let port = sys.join(format!(
        "class/infiniband/{}/ports/{}",
        roce.rdma_device, roce.port
    ));
    let slot = roce.gid_index;
    let found = fs::read_to_string(port.join(format!("gids/{slot}")))
        .ok()
        .and_then(|g| g.trim().parse::<Ipv6Addr>().ok());
    let kind = fs::read_to_string(port.join(format!("gid_attrs/types/{slot}"))).unwrap_or_default();
    match found {
        Some(g) if g == roce.gid && kind.trim() == "RoCE v2" => None,
        Some(g) if g == roce.gid => Some(format!(
            "slot {slot} of {} port {} holds the GID as {:?}, expected RoCE v2",
            roce.rdma_device,
            roce.port,
            kind.trim()
        )),
        Some(g) if g.is_unspecified() => Some(format!(
            "slot {slot} of {} port {} reads zero here, expected {}: the GID is not visible in \
             this namespace (DOCA-OFED shows zeros for GIDs of other namespaces' netdevs; is \
             the child still there and up?)",
            roce.rdma_device, roce.port, roce.gid
        )),
        Some(g) => Some(format!(
            "slot {slot} of {} port {} holds {g}, expected {}: the GID moved (address changed); \
             run `roce-ipvlan diagnose`",
            roce.rdma_device, roce.port, roce.gid
        )),
        None => Some(format!(
            "slot {slot} of {} port {} cannot be read here: no such RDMA device in this pod \
             (is the device plugin's resource requested?)",
            roce.rdma_device, roce.port
        )),
    }
}

// --- serve -------------------------------------------------------------------------------

fn serve(port: u16) -> Result<(), String> {
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("cannot listen on port {port}: {e}"))?;
    let have_pingpong = on_path(PINGPONG);
    eprintln!(
        "roce-ipvlan fabric-check: serving on port {port} ({} rails here{})",
        rails(Path::new("/sys")).map(|r| r.len()).unwrap_or(0),
        if have_pingpong {
            ""
        } else {
            "; no ibv_rc_pingpong: RDMA not checked"
        }
    );
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        thread::spawn(move || {
            if let Err(e) = answer(conn, have_pingpong) {
                eprintln!("roce-ipvlan fabric-check: a request failed: {e}");
            }
        });
    }
    Ok(())
}

/// One request on `conn`, one answer.
fn answer(conn: TcpStream, have_pingpong: bool) -> io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line)?;
    let request: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    let reply = match request["op"].as_str() {
        Some("rails") => json!({
            "rails": rails(Path::new("/sys"))?,
            "pingpong": have_pingpong,
        }),
        Some("hello") => json!({
            "from": conn.peer_addr()?.ip().to_canonical(),
            "to": conn.local_addr()?.ip().to_canonical(),
        }),
        Some("pingpong") => start_pingpong_server(&request),
        _ => json!({"error": format!("unknown request {line:?}")}),
    };
    let mut conn = conn;
    writeln!(conn, "{reply}")?;
    conn.shutdown(Shutdown::Both).ok();
    Ok(())
}

/// Starts `ibv_rc_pingpong` as the server for the rail the request names, and answers once it
/// runs (it lives until its one client is done, or 30 s).
fn start_pingpong_server(request: &Value) -> Value {
    let (Some(interface), Some(port)) = (request["interface"].as_str(), request["port"].as_u64())
    else {
        return json!({"error": "a pingpong request names interface and port"});
    };
    let here = match rails(Path::new("/sys")) {
        Ok(r) => r,
        Err(e) => return json!({"error": format!("cannot read this pod's rails: {e}")}),
    };
    let Some(rail) = here.into_iter().find(|r| r.interface == interface) else {
        return json!({"error": format!("no rail {interface} in the serving pod")});
    };
    // Under `timeout 30` where the image has it, so a server whose client never comes ends.
    let args = pingpong_args(&rail, port as u16);
    let spawn = |program: &str, pre: &[&str]| {
        Command::new(program)
            .args(pre)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    };
    let child = spawn("timeout", &["30", PINGPONG]).or_else(|_| spawn(PINGPONG, &[]));
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return json!({"error": format!("cannot start {PINGPONG}: {e}")}),
    };
    // It opens the device and makes its QP before it listens (seconds under load): answer once
    // it listens (a probe connection would take its one client's place), or once it has ended.
    for _ in 0..100 {
        if listening(port as u16) {
            thread::spawn(move || child.wait());
            return json!({"started": true});
        }
        if let Ok(Some(status)) = child.try_wait() {
            return json!({"error": format!(
                "{PINGPONG} on {}/{} GID {} ended before it listened ({status})",
                rail.rdma_device, rail.port, rail.gid_index
            )});
        }
        thread::sleep(Duration::from_millis(100));
    }
    thread::spawn(move || child.wait());
    json!({"error": format!("{PINGPONG} did not listen on port {port} within 10 s")})
}

/// Whether a TCP socket of this namespace listens on `port` (/proc/net/tcp and tcp6, state 0A).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

fn pingpong_args(rail: &Rail, port: u16) -> Vec<String> {
    vec![
        "-d".into(),
        rail.rdma_device.clone(),
        "-i".into(),
        rail.port.to_string(),
        "-g".into(),
        rail.gid_index.to_string(),
        "-p".into(),
        port.to_string(),
        "-n".into(),
        "10".into(),
    ]
}

/// The name of link `index` in this namespace (from /sys/class/net), or `#index`.
fn link_name(index: u32) -> String {
    fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .find(|e| {
            fs::read_to_string(e.path().join("ifindex"))
                .is_ok_and(|i| i.trim() == index.to_string())
        })
        .map_or(format!("link #{index}"), |e| {
            e.file_name().to_string_lossy().into_owned()
        })
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

// --- check -------------------------------------------------------------------------------

/// The peer's answer to "rails".
#[derive(Debug, Deserialize)]
struct PeerRails {
    rails: Vec<Rail>,
    pingpong: bool,
}

/// One rail's outcome: the checks that ran, in order, and the first failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Outcome {
    interface: String,
    here: Option<Rail>,
    peer: Option<Rail>,
    /// (check, "ok" / "skipped: why" / the failure)
    checks: Vec<(&'static str, String)>,
    works: bool,
    why: Option<String>,
}

impl Outcome {
    fn new(interface: &str, here: Option<&Rail>, peer: Option<&Rail>) -> Outcome {
        Outcome {
            interface: interface.to_string(),
            here: here.cloned(),
            peer: peer.cloned(),
            checks: Vec::new(),
            works: false,
            why: None,
        }
    }
    fn pass(&mut self, check: &'static str, note: impl Into<String>) {
        self.checks.push((check, note.into()));
    }
    /// Records the failure and ends the rail's checks (the caller returns).
    fn fail(&mut self, check: &'static str, why: String) {
        self.checks.push((check, "FAIL".into()));
        self.why = Some(format!("{check}: {why}"));
    }
}

/// Pairs this pod's rails with the peer's by interface name: every name either side has, in
/// order; a rail without a counterpart fails at once.
fn pair<'a>(
    here: &'a [Rail],
    peer: &'a [Rail],
) -> Vec<(String, Option<&'a Rail>, Option<&'a Rail>)> {
    let mut names: Vec<&str> = here
        .iter()
        .chain(peer)
        .map(|r| r.interface.as_str())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            (
                n.to_string(),
                here.iter().find(|r| r.interface == n),
                peer.iter().find(|r| r.interface == n),
            )
        })
        .collect()
}

/// The MAC the neighbour entry holds, as `ip neigh` writes it.
fn mac_string(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The arp check's verdict (pure): what the neighbour entry for the next hop holds against the
/// peer's rails' MACs. `on_link`: the next hop is the peer's rail address itself (flat); on a
/// routed rail it is the gateway, whose MAC the peer does not know.
fn arp_verdict(
    next_hop: IpAddr,
    on_link: bool,
    entry: Option<(Option<String>, &str)>,
    peer_rail: &Rail,
    peer_rails: &[Rail],
) -> Result<String, String> {
    let Some((mac, state)) = entry else {
        return Err(format!(
            "no neighbour entry for {next_hop} after the TCP exchange"
        ));
    };
    let Some(mac) = mac else {
        return Err(format!(
            "the neighbour entry for {next_hop} is unresolved ({state})"
        ));
    };
    if !on_link {
        return Ok(format!("gateway {next_hop} at {mac} ({state})"));
    }
    if mac.eq_ignore_ascii_case(&peer_rail.mac) {
        return Ok(format!(
            "{next_hop} at {mac}, the peer's {} ({state})",
            peer_rail.interface
        ));
    }
    match peer_rails.iter().find(|r| r.mac.eq_ignore_ascii_case(&mac)) {
        Some(other) => Err(format!(
            "{next_hop} (the peer's {}) was answered by the MAC of the peer's {} ({mac}), another \
             rail: ARP flux. The peer's node answers ARP on every rail: keep the NAD's arpSysctls \
             (the default) and sourceRouting, and set arp_ignore=1/arp_announce=2 on the node's \
             rails",
            peer_rail.interface, other.interface
        )),
        None => Err(format!(
            "{next_hop} (the peer's {}, MAC {}) is at {mac}, which is none of the peer's rails: \
             another host answers for the address, or the rails are cross-wired",
            peer_rail.interface, peer_rail.mac
        )),
    }
}

/// The rdma check's verdict (pure) from ibv_rc_pingpong's exit and output.
fn rdma_verdict(ok: bool, output: &str, here: &Rail) -> Result<String, String> {
    if ok {
        return Ok(format!(
            "{PINGPONG} over {}/{} GID {}",
            here.rdma_device, here.port, here.gid_index
        ));
    }
    let last = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim();
    if output.contains("Failed to modify QP") && output.contains("RTR") {
        return Err(format!(
            "QP to RTR refused at GID index {} of {}: the kernel does not let this pod use that \
             GID (DOCA-OFED: the GID's netdev must be in the pod); check that the index is the \
             child's (`roce-ipvlan env`)",
            here.gid_index, here.rdma_device
        ));
    }
    Err(format!("{PINGPONG} failed: {last}"))
}

fn request(to: SocketAddr, body: &Value, from: Option<IpAddr>) -> io::Result<Value> {
    let mut conn = connect(to, from)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    writeln!(conn, "{body}")?;
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A TCP connection to `to`, from address `from` when given (bound before connecting, so the
/// kernel routes it as the rail's traffic: the policy rule for that source applies).
fn connect(to: SocketAddr, from: Option<IpAddr>) -> io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect_timeout(&to, CONNECT_TIMEOUT);
    };
    let domain = if to.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a new socket; its descriptor is owned by the TcpStream from here on.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid socket that nothing else owns.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let (addr, len) = sockaddr(SocketAddr::new(from, 0));
    // SAFETY: addr is a sockaddr of len bytes.
    if unsafe { libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (addr, len) = sockaddr(to);
    // A blocking connect bounded by SO_SNDTIMEO.
    let timeout = libc::timeval {
        // Typed by the field (libc deprecates naming time_t: musl 1.2 widened it to 64 bits).
        tv_sec: CONNECT_TIMEOUT
            .as_secs()
            .try_into()
            .expect("a connect timeout of seconds fits in time_t"),
        tv_usec: 0,
    };
    // SAFETY: setsockopt with a timeval of its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            &timeout as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // SAFETY: addr is a sockaddr of len bytes.
    if unsafe { libc::connect(fd, &addr as *const _ as *const libc::sockaddr, len) } != 0 {
        let e = io::Error::last_os_error();
        // SO_SNDTIMEO ran out: the connect is still "in progress".
        if e.raw_os_error() == Some(libc::EINPROGRESS) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            ));
        }
        return Err(e);
    }
    Ok(stream)
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn check(peer: String, port: u16, as_json: bool, rdma: bool) -> Result<i32, String> {
    let here =
        rails(Path::new("/sys")).map_err(|e| format!("cannot read this pod's interfaces: {e}"))?;
    if here.is_empty() {
        return Err(
            "no roce-ipvlan rails in this pod (no interface whose ifalias ADD wrote): \
                    attach a roce-ipvlan network"
                .into(),
        );
    }
    let server = resolve(&peer, port)?;
    let peer = server.ip();
    let answer = request(server, &json!({"op": "rails"}), None).map_err(|e| {
        format!(
            "the peer {server} does not answer on the pod network ({e}): is `roce-ipvlan \
             fabric-check serve --port {port}` running there?"
        )
    })?;
    let theirs: PeerRails = serde_json::from_value(answer.clone())
        .map_err(|e| format!("the peer's answer is not a list of rails ({e}): {answer}"))?;
    let routes = RouteSocket::current().map_err(|e| e.to_string())?;
    let run_rdma = rdma && theirs.pingpong && on_path(PINGPONG);
    let rdma_skip = if !rdma {
        "skipped (--no-rdma)"
    } else if !on_path(PINGPONG) {
        "skipped (no ibv_rc_pingpong here)"
    } else {
        "skipped (no ibv_rc_pingpong in the peer)"
    };
    let mut outcomes = Vec::new();
    for (i, (name, mine, other)) in pair(&here, &theirs.rails).into_iter().enumerate() {
        let mut o = Outcome::new(&name, mine, other);
        check_rail(
            &mut o,
            mine,
            other,
            &theirs.rails,
            &routes,
            port,
            (run_rdma, rdma_skip, peer),
            i,
        );
        o.works = o.why.is_none();
        outcomes.push(o);
    }
    let working = outcomes.iter().filter(|o| o.works).count();
    if as_json {
        println!(
            "{}",
            json!({"peer": server.to_string(), "rails": outcomes, "working": working})
        );
    } else {
        print!("{}", render(server, &outcomes));
    }
    Ok(if working == outcomes.len() { 0 } else { 1 })
}

#[allow(clippy::too_many_arguments)]
fn check_rail(
    o: &mut Outcome,
    mine: Option<&Rail>,
    other: Option<&Rail>,
    peer_rails: &[Rail],
    routes: &RouteSocket,
    port: u16,
    (run_rdma, rdma_skip, peer): (bool, &str, IpAddr),
    i: usize,
) {
    let (Some(mine), Some(other)) = (mine, other) else {
        let side = if mine.is_none() {
            "this pod"
        } else {
            "the peer"
        };
        return o.fail(
            "pair",
            format!(
                "{side} has no {}: both pods must attach the same networks",
                o.interface
            ),
        );
    };
    if let Some(p) = &mine.gid_problem {
        return o.fail("gid", format!("here: {p}"));
    }
    if let Some(p) = &other.gid_problem {
        return o.fail("gid", format!("the peer: {p}"));
    }
    o.pass("gid", "ok");
    let route = match routes.route_to(other.address, mine.address) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return o.fail(
                "route",
                format!(
                    "no route to {} from {} (the rails' subnets or the router's advertisements?)",
                    other.address, mine.address
                ),
            )
        }
        Err(e) => return o.fail("route", e.to_string()),
    };
    if route.oif != mine.ifindex {
        return o.fail(
            "route",
            format!(
                "traffic to {} from {} leaves by {}, not {}: the child's source rule or its table \
                 is missing (sourceRouting off, or the link went down and took the table's \
                 route), or another rule wins",
                other.address,
                mine.address,
                link_name(route.oif),
                mine.interface
            ),
        );
    }
    o.pass(
        "route",
        route
            .gateway
            .map_or("on-link".to_string(), |g| format!("via {g}")),
    );
    match request(
        SocketAddr::new(other.address, port),
        &json!({"op": "hello"}),
        Some(mine.address),
    ) {
        Ok(seen) if seen["from"].as_str() == Some(&mine.address.to_string()) => {
            o.pass("reach", "ok")
        }
        Ok(seen) => {
            return o.fail(
                "reach",
                format!(
                    "the peer saw the connection come from {}, not {}",
                    seen["from"], mine.address
                ),
            )
        }
        Err(e) => {
            return o.fail(
                "reach",
                format!("TCP from {} to {}:{port}: {e}", mine.address, other.address),
            )
        }
    }
    let next_hop = route.gateway.unwrap_or(other.address);
    let entry = routes
        .neighbour(mine.ifindex, next_hop)
        .ok()
        .flatten()
        .map(|n| (n.lladdr.as_deref().map(mac_string), n.state));
    match arp_verdict(next_hop, route.gateway.is_none(), entry, other, peer_rails) {
        Ok(note) => o.pass("arp", note),
        Err(why) => return o.fail("arp", why),
    }
    if !run_rdma {
        return o.pass("rdma", rdma_skip);
    }
    let pp_port = port.wrapping_add(1 + i as u16);
    let started = request(
        SocketAddr::new(other.address, port),
        &json!({"op": "pingpong", "interface": other.interface, "port": pp_port}),
        Some(mine.address),
    );
    match started {
        Ok(v) if v["started"] == true => {}
        Ok(v) => {
            return o.fail(
                "rdma",
                format!("the peer could not start {PINGPONG}: {}", v["error"]),
            )
        }
        Err(e) => {
            return o.fail(
                "rdma",
                format!("the peer did not answer the pingpong request: {e}"),
            )
        }
    }
    let mut output = String::new();
    let mut ok = false;
    for _ in 0..10 {
        let run = Command::new("timeout")
            .arg("20")
            .arg(PINGPONG)
            .args(pingpong_args(mine, pp_port))
            // Its own exchange of QP numbers and GIDs goes over the pod network, as NCCL's
            // bootstrap does: a rail address would be reached by whichever rail's connected
            // route comes first in the pod's main table.
            .arg(peer.to_string())
            .stdin(Stdio::null())
            .output();
        match run {
            Ok(out) => {
                output = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                ok = out.status.success();
            }
            Err(e) => output = format!("cannot run {PINGPONG}: {e}"),
        }
        if ok || !output.contains("Couldn't connect") {
            break;
        }
        thread::sleep(Duration::from_millis(500));
    }
    match rdma_verdict(ok, &output, mine) {
        Ok(note) => o.pass("rdma", note),
        Err(why) => o.fail("rdma", why),
    }
}

/// PEER as an address, or a name resolved (a headless Service's, in a pod) to its first address.
fn resolve(peer: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = peer.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    use std::net::ToSocketAddrs;
    (peer, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve PEER {peer:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("PEER {peer:?} resolves to no address"))
}

/// The table people read: one line per rail, then each failing rail's reason.
fn render(server: SocketAddr, outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let working = outcomes.iter().filter(|o| o.works).count();
    out += &format!(
        "fabric-check against {server}: {working} of {} rails work\n",
        outcomes.len()
    );
    out += &format!(
        "{:<10} {:<34} {:<34} {}\n",
        "RAIL", "HERE", "PEER", "CHECKS"
    );
    let side = |r: &Option<Rail>| {
        r.as_ref().map_or("-".to_string(), |r| {
            format!("{} {}/{}#{}", r.address, r.rdma_device, r.port, r.gid_index)
        })
    };
    for o in outcomes {
        let checks: Vec<String> = o
            .checks
            .iter()
            .map(|(c, v)| {
                if v == "FAIL" {
                    format!("{c}:FAIL")
                } else if v.starts_with("skipped") {
                    format!("{c}:-")
                } else {
                    format!("{c}:ok")
                }
            })
            .collect();
        out += &format!(
            "{:<10} {:<34} {:<34} {}\n",
            o.interface,
            side(&o.here),
            side(&o.peer),
            checks.join(" ")
        );
    }
    for o in outcomes.iter().filter(|o| !o.works) {
        out += &format!("{}: {}\n", o.interface, o.why.as_deref().unwrap_or("?"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> cli::Outcome<Args> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn rail(interface: &str, mac: &str, address: &str) -> Rail {
        let address: IpAddr = address.parse().unwrap();
        let gid = match address {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        Rail {
            interface: interface.into(),
            ifindex: 3,
            mac: mac.into(),
            address,
            rdma_device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            gid,
            gid_problem: None,
        }
    }

    #[test]
    fn arguments() {
        assert_eq!(
            args(&["serve"]).unwrap(),
            Parsed::Run(Args::Serve { port: DEFAULT_PORT })
        );
        assert_eq!(
            args(&["10.244.1.5", "--port", "9000", "--json", "--no-rdma"]).unwrap(),
            Parsed::Run(Args::Check {
                peer: "10.244.1.5".into(),
                port: 9000,
                json: true,
                rdma: false
            })
        );
        assert_eq!(
            resolve("10.244.1.5", 9).unwrap(),
            "10.244.1.5:9".parse().unwrap()
        );
        assert!(resolve("no-such-peer.invalid", 9).is_err());
        assert!(args(&[]).is_err());
        assert!(args(&["serve", "10.0.0.1"]).is_err());
        assert_eq!(args(&["--help"]).unwrap(), Parsed::Help);
    }

    #[test]
    fn rails_pair_by_name_and_a_missing_one_shows() {
        let here = [rail("net1", "a", "10.0.0.1"), rail("net2", "b", "10.0.0.2")];
        let peer = [
            rail("net2", "c", "10.0.0.12"),
            rail("net3", "d", "10.0.0.13"),
        ];
        let pairs = pair(&here, &peer);
        let names: Vec<(&str, bool, bool)> = pairs
            .iter()
            .map(|(n, h, p)| (n.as_str(), h.is_some(), p.is_some()))
            .collect();
        assert_eq!(
            names,
            [
                ("net1", true, false),
                ("net2", true, true),
                ("net3", false, true)
            ]
        );
    }

    #[test]
    fn arp_verdicts_name_the_rail_that_answered() {
        let peer = [
            rail("net1", "52:54:00:1a:00:00", "172.16.0.11"),
            rail("net2", "52:54:00:1a:00:01", "172.16.0.12"),
        ];
        let hop: IpAddr = "172.16.0.12".parse().unwrap();
        let own = Some(("52:54:00:1a:00:01".to_string()).into());
        assert!(arp_verdict(hop, true, own.map(|m| (m, "reachable")), &peer[1], &peer).is_ok());
        let flux = arp_verdict(
            hop,
            true,
            Some((Some("52:54:00:1a:00:00".into()), "reachable")),
            &peer[1],
            &peer,
        )
        .unwrap_err();
        assert!(
            flux.contains("the MAC of the peer's net1") && flux.contains("ARP flux"),
            "{flux}"
        );
        let stranger = arp_verdict(
            hop,
            true,
            Some((Some("02:00:00:00:00:09".into()), "stale")),
            &peer[1],
            &peer,
        )
        .unwrap_err();
        assert!(stranger.contains("none of the peer's rails"), "{stranger}");
        assert!(arp_verdict(hop, true, None, &peer[1], &peer)
            .unwrap_err()
            .contains("no neighbour entry"));
        assert!(
            arp_verdict(hop, true, Some((None, "failed")), &peer[1], &peer)
                .unwrap_err()
                .contains("unresolved (failed)")
        );
        // A routed rail: the gateway's MAC is nothing the peer knows.
        let gw: IpAddr = "fe80::1".parse().unwrap();
        assert!(arp_verdict(
            gw,
            false,
            Some((Some("02:00:00:00:00:01".into()), "reachable")),
            &peer[1],
            &peer
        )
        .is_ok());
    }

    #[test]
    fn rdma_verdicts() {
        let r = rail("net1", "a", "10.0.0.1");
        assert!(rdma_verdict(true, "", &r).is_ok());
        let rtr = rdma_verdict(
            false,
            "  local address: ...\nFailed to modify QP to RTR\n",
            &r,
        )
        .unwrap_err();
        assert!(
            rtr.starts_with("QP to RTR refused at GID index 1 of rxe0"),
            "{rtr}"
        );
        assert_eq!(
            rdma_verdict(false, "x\nCouldn't connect to 10.0.0.2:18721\n", &r).unwrap_err(),
            "ibv_rc_pingpong failed: Couldn't connect to 10.0.0.2:18721"
        );
    }

    #[test]
    fn gid_problems_from_a_recorded_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let net = sys.join("class/net/net1");
        fs::create_dir_all(&net).unwrap();
        fs::write(
            net.join("ifalias"),
            "rdma_dev=rxe0 port=1 gid_index=1 gid=::ffff:10.9.0.7\n",
        )
        .unwrap();
        fs::write(net.join("ifindex"), "3\n").unwrap();
        fs::write(net.join("address"), "52:54:00:0a:00:00\n").unwrap();
        fs::create_dir_all(sys.join("class/net/eth0")).unwrap();
        let port = sys.join("class/infiniband/rxe0/ports/1");
        fs::create_dir_all(port.join("gids")).unwrap();
        fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        let set = |gid: &str| fs::write(port.join("gids/1"), format!("{gid}\n")).unwrap();
        fs::write(port.join("gid_attrs/types/1"), "RoCE v2\n").unwrap();
        set("0000:0000:0000:0000:0000:ffff:0a09:0007");
        let found = rails(sys).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].address, "10.9.0.7".parse::<IpAddr>().unwrap());
        assert_eq!(
            (found[0].ifindex, found[0].mac.as_str()),
            (3, "52:54:00:0a:00:00")
        );
        assert_eq!(found[0].gid_problem, None);
        set("0000:0000:0000:0000:0000:0000:0000:0000");
        let zero = rails(sys).unwrap()[0].gid_problem.clone().unwrap();
        assert!(
            zero.contains("reads zero here") && zero.contains("DOCA-OFED"),
            "{zero}"
        );
        set("0000:0000:0000:0000:0000:ffff:0a09:0008");
        assert!(rails(sys).unwrap()[0]
            .gid_problem
            .clone()
            .unwrap()
            .contains("the GID moved"));
        fs::remove_file(port.join("gids/1")).unwrap();
        assert!(rails(sys).unwrap()[0]
            .gid_problem
            .clone()
            .unwrap()
            .contains("cannot be read"));
    }

    #[test]
    fn the_table_says_which_rail_and_why() {
        let mut ok = Outcome::new(
            "net1",
            Some(&rail("net1", "a", "10.0.0.1")),
            Some(&rail("net1", "b", "10.0.0.11")),
        );
        ok.pass("gid", "ok");
        ok.works = true;
        let mut bad = Outcome::new("net2", Some(&rail("net2", "c", "10.0.0.2")), None);
        bad.fail(
            "pair",
            "the peer has no net2: both pods must attach the same networks".into(),
        );
        let text = render("10.244.1.5:18720".parse().unwrap(), &[ok, bad]);
        assert!(
            text.starts_with("fabric-check against 10.244.1.5:18720: 1 of 2 rails work\n"),
            "{text}"
        );
        assert!(text.contains("net2: pair: the peer has no net2"), "{text}");
    }
}
