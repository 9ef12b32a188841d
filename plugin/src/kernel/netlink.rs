//! Route netlink on plain, blocking sockets ([`RouteSocket`], on the one [`Socket`] of
//! socket.rs): every request the plugin and its tools make is answered within the send (a
//! change's ACK, a dump's parts up to NLMSG_DONE), so no runtime is needed. Requests are
//! netlink-packet-route's typed messages; replies are read lazily, for the few attributes the
//! plugin uses. [`AddrEvents`] is the one subscription: the pod's IPv6 address changes, for
//! the SLAAC wait.
//!
//! A socket is bound to one network namespace: the one it was created in. For the pod's
//! namespace it is created on a short-lived thread inside it (netns.rs) and then used from the
//! main thread, which never changes namespace.

pub(crate) mod socket;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use ipnetwork::IpNetwork;
use netlink_packet_core::{parse_u32, Emitable, NlaBuffer, NlasIterator, Parseable};
use netlink_packet_route::address::{AddressAttribute, AddressHeader, AddressMessage};
pub use netlink_packet_route::link::IpVlanMode;
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, LinkAttribute, LinkExtentMask, LinkFlags, LinkHeader, LinkInfo,
    LinkMessage,
};
use netlink_packet_route::neighbour::{NeighbourHeader, NeighbourMessage, NeighbourState};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleHeader, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use self::socket::{malformed, Failure, Socket};
use crate::kernel::netns::Netns;
use crate::protocol::error::{Error, Result};

/// Where the kernel sends a packet ([`RouteSocket::route_to`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTo {
    pub oif: u32,
    pub gateway: Option<IpAddr>,
}

/// A neighbour table entry ([`RouteSocket::neighbour`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// The link-layer address; None while unresolved (incomplete, failed).
    pub lladdr: Option<Vec<u8>>,
    /// The NUD state, as `ip neigh` names it.
    pub state: &'static str,
}

/// What the plugin needs to know about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    pub mac: Vec<u8>,
    pub admin_up: bool,
    pub kind: Option<InfoKind>,
    pub ipvlan_mode: Option<IpVlanMode>,
    /// IFLA_LINK: the parent's index (in the parent's namespace for a child moved elsewhere).
    pub parent: Option<u32>,
    /// IFLA_LINK_NETNSID was present: the parent lives in another namespace, so `parent` is an
    /// index of that namespace.
    pub parent_elsewhere: bool,
    pub alias: Option<String>,
}

impl Link {
    pub fn mac_string(&self) -> String {
        self.mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// A link's kind (IFLA_INFO_KIND), for the kinds the plugin tells apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoKind {
    IpVlan,
    MacVlan,
    Other(String),
}

impl From<&str> for InfoKind {
    fn from(kind: &str) -> InfoKind {
        match kind {
            "ipvlan" => InfoKind::IpVlan,
            "macvlan" => InfoKind::MacVlan,
            other => InfoKind::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for InfoKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InfoKind::IpVlan => "ipvlan",
            InfoKind::MacVlan => "macvlan",
            InfoKind::Other(kind) => kind,
        })
    }
}

/// An address's IFA_F_* flags (linux/if_addr.h), as the 32-bit IFA_FLAGS carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressFlags(u32);

impl AddressFlags {
    pub const OPTIMISTIC: AddressFlags = AddressFlags(libc::IFA_F_OPTIMISTIC);
    pub const DADFAILED: AddressFlags = AddressFlags(libc::IFA_F_DADFAILED);
    pub const TENTATIVE: AddressFlags = AddressFlags(libc::IFA_F_TENTATIVE);
    pub const PERMANENT: AddressFlags = AddressFlags(libc::IFA_F_PERMANENT);
    #[cfg(test)]
    pub const MANAGETEMPADDR: AddressFlags = AddressFlags(libc::IFA_F_MANAGETEMPADDR);

    #[cfg(test)]
    pub const fn empty() -> AddressFlags {
        AddressFlags(0)
    }

    pub const fn from_bits_retain(bits: u32) -> AddressFlags {
        AddressFlags(bits)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: AddressFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AddressFlags {
    type Output = AddressFlags;

    fn bitor(self, other: AddressFlags) -> AddressFlags {
        AddressFlags(self.0 | other.0)
    }
}

/// An IPv6 address of a link with the flags that tell SLAAC and DAD state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr6 {
    pub index: u32,
    pub addr: std::net::Ipv6Addr,
    pub prefix: u8,
    pub flags: AddressFlags,
}

/// An address of a link (either family) with its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub index: u32,
    pub ip: IpAddr,
    pub prefix: u8,
    pub flags: AddressFlags,
}

impl Addr {
    fn v6(self) -> Option<Addr6> {
        match self.ip {
            IpAddr::V6(addr) => Some(Addr6 {
                index: self.index,
                addr,
                prefix: self.prefix,
                flags: self.flags,
            }),
            IpAddr::V4(_) => None,
        }
    }
}

/// A change of an IPv6 address, from the kernel's RTNLGRP_IPV6_IFADDR notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrEvent {
    New(Addr6),
    Del(Addr6),
    /// The socket's buffer overran (ENOBUFS): some events were dropped, so what is known must
    /// be read again.
    Lost,
}

/// A subscription to IPv6 address changes in one namespace: a netlink socket bound to
/// RTNLGRP_IPV6_IFADDR, read with poll(2) until a deadline.
pub struct AddrEvents {
    socket: netlink_sys::Socket,
    /// Events of a datagram already read, not yet returned.
    pending: VecDeque<AddrEvent>,
    /// The receive buffer, kept across reads (socket.rs's RECV_BUF says why), as large.
    buf: Vec<u8>,
}

impl AddrEvents {
    /// Subscribes in `ns`; events that happen after this call are not missed. `also` runs on
    /// the same thread in `ns` (one thread into the namespace for both), for other sockets
    /// that must be opened there.
    pub fn subscribe_with<T: Send>(
        ns: &Netns,
        also: impl FnOnce() -> T + Send,
    ) -> Result<(AddrEvents, T)> {
        let (subscribed, other) = ns.run(move || (AddrEvents::subscribe_here(), also()))?;
        let events =
            subscribed.map_err(|e| Error::io("cannot subscribe to IPv6 address events", e))?;
        Ok((events, other))
    }

    fn subscribe_here() -> std::io::Result<AddrEvents> {
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)?;
        socket.bind(&netlink_sys::SocketAddr::new(
            0,
            1 << (libc::RTNLGRP_IPV6_IFADDR - 1),
        ))?;
        Ok(AddrEvents {
            socket,
            pending: VecDeque::new(),
            buf: Vec::with_capacity(socket::RECV_BUF_LEN),
        })
    }

    /// The next address event; `None` when `deadline` passes first.
    pub fn next_until(&mut self, deadline: Instant) -> std::io::Result<Option<AddrEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut fd = libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // Rounded up, so that the wait never ends before the deadline.
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            // SAFETY: `fd` is one valid pollfd for the whole call.
            let ready = unsafe { libc::poll(&mut fd, 1, ms) };
            if ready < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if ready == 0 {
                continue;
            }
            self.buf.clear();
            match self.socket.recv_from(&mut self.buf, libc::MSG_DONTWAIT) {
                Ok((_, from)) => self
                    .pending
                    .extend(address_events(from.port_number(), &self.buf)),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.pending.push_back(AddrEvent::Lost)
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The IPv6 address events of a datagram of notifications from netlink port `sender`. Only
/// the kernel's notifications count: a datagram another process sent to the subscription
/// socket (its port id is not 0) is dropped whole.
fn address_events(sender: u32, buf: &[u8]) -> Vec<AddrEvent> {
    if sender != 0 {
        tracing::warn!(
            sender,
            "dropped a datagram on the address subscription that the kernel did not send"
        );
        return Vec::new();
    }
    socket::messages(buf)
        .map_while(|message| message.ok())
        .filter_map(|message| {
            let addr = parse_addr_reply(message.payload()).and_then(Addr::v6)?;
            match message.message_type() {
                libc::RTM_NEWADDR => Some(AddrEvent::New(addr)),
                libc::RTM_DELADDR => Some(AddrEvent::Del(addr)),
                _ => None,
            }
        })
        .collect()
}

/// A policy rule: what identifies it (to delete it) and what the plugin reads of it.
#[derive(Debug, Clone)]
pub struct Rule {
    pub table: u32,
    pub source: Option<IpAddr>,
    family: AddressFamily,
    source_len: u8,
    priority: Option<u32>,
    action: RuleAction,
}

/// A plain, blocking NETLINK_ROUTE socket ([`Socket`]). Requests are netlink-packet-route's
/// typed messages; replies are read lazily, the header and then only the attributes the
/// plugin uses, through netlink-packet-core's attribute iterator, so that an attribute a new
/// kernel adds or reshapes never fails a read (decoding whole messages, every attribute and
/// the nested per-family ones included, was also most of what a lookup cost a short-lived
/// process).
pub struct RouteSocket {
    socket: Socket,
}

/// NLM_F_CREATE | NLM_F_EXCL: a create request that fails with EEXIST on a duplicate.
const CREATE_NEW: u16 = netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL;

impl RouteSocket {
    /// A socket in the calling thread's namespace, as an I/O result (for a thread in a pod).
    fn new() -> std::io::Result<RouteSocket> {
        Ok(RouteSocket {
            socket: Socket::open(netlink_sys::protocols::NETLINK_ROUTE)?,
        })
    }

    /// A socket in the calling thread's namespace.
    pub fn current() -> Result<RouteSocket> {
        RouteSocket::new().map_err(|e| Error::io("cannot open a netlink socket", e))
    }

    /// A socket in `ns`, opened on a thread inside it (netns.rs).
    pub fn open_in(ns: &Netns) -> Result<RouteSocket> {
        ns.run(RouteSocket::new)?.map_err(|e| {
            Error::io(
                format!("cannot open a netlink socket in {}", ns.path().display()),
                e,
            )
        })
    }

    /// One RTM_GETLINK by name (IFLA_IFNAME), without the link's counters
    /// (RTEXT_FILTER_SKIP_STATS); None when there is no such link.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        match self.socket.get(getlink(Some(name)), libc::RTM_NEWLINK) {
            Ok(reply) => match parse_link_reply(&reply) {
                Some(link) => Ok(Some(link)),
                None => Err(malformed("an RTM_GETLINK answer without a whole link")
                    .into_error(format!("cannot look up link {name}"))),
            },
            Err(Failure::Kernel(errno)) if errno == libc::ENODEV => Ok(None),
            Err(e) => Err(e.into_error(format!("cannot look up link {name}"))),
        }
    }

    /// Every link of this socket's namespace (one RTM_GETLINK dump, without counters).
    pub fn links(&self) -> Result<Vec<Link>> {
        let replies = self
            .socket
            .dump(|| getlink(None), libc::RTM_NEWLINK)
            .map_err(|e| e.into_error("cannot list links".into()))?;
        Ok(replies.iter().filter_map(|p| parse_link_reply(p)).collect())
    }

    /// Creates an IPvlan L2 child of `master` (a link of this socket's namespace) directly in
    /// `target` (IFLA_NET_NS_FD), so it never appears in this namespace.
    pub fn create_ipvlan_l2(
        &self,
        name: &str,
        master: u32,
        mtu: Option<u32>,
        target: &Netns,
    ) -> Result<()> {
        self.socket
            .ack(
                ipvlan_l2(name, master, mtu, target.fd().as_raw_fd()),
                CREATE_NEW,
            )
            .map_err(|e| {
                e.into_error(format!(
                    "cannot create IPvlan L2 child {name} of link #{master}"
                ))
            })
    }

    pub fn rename(&self, index: u32, name: &str) -> Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.attributes
            .push(LinkAttribute::IfName(name.to_string()));
        self.socket
            .ack(RouteNetlinkMessage::SetLink(link), 0)
            .map_err(|e| e.into_error(format!("cannot rename link #{index} to {name}")))
    }

    pub fn set_up(&self, index: u32) -> Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.header.flags = LinkFlags::Up;
        link.header.change_mask = LinkFlags::Up;
        self.socket
            .ack(RouteNetlinkMessage::SetLink(link), 0)
            .map_err(|e| e.into_error(format!("cannot bring link #{index} up")))
    }

    pub fn set_alias(&self, index: u32, alias: &str) -> Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.attributes
            .push(LinkAttribute::IfAlias(alias.to_string()));
        self.socket
            .ack(RouteNetlinkMessage::SetLink(link), 0)
            .map_err(|e| e.into_error(format!("cannot set the alias of link #{index}")))
    }

    /// Adds `addr` to link `index`, as rtnetlink and `ip address add` do: IFA_ADDRESS and
    /// IFA_LOCAL, and for IPv4 below /31 the broadcast address.
    pub fn add_address(&self, index: u32, addr: IpNetwork) -> Result<()> {
        self.socket
            .ack(new_address(index, addr), CREATE_NEW)
            .map_err(|e| e.into_error(format!("cannot add address {addr} to link #{index}")))
    }

    /// Adds a unicast route through link `dev` into `table`: via `gw` if given (scope
    /// universe), else on-link (scope link); `src` is its preferred source.
    pub fn add_route(
        &self,
        table: u32,
        dst: IpNetwork,
        gw: Option<IpAddr>,
        dev: u32,
        src: Option<IpAddr>,
    ) -> Result<()> {
        let same_family = |a: &Option<IpAddr>| a.is_none_or(|a| a.is_ipv6() == dst.is_ipv6());
        if !same_family(&gw) || !same_family(&src) {
            // Refused before it is sent, with the errno the kernel would answer.
            return Err(Error::netlink(
                format!(
                    "cannot add route {dst} via {gw:?} (source {src:?}): the gateway and \
                     source must be of the destination's address family"
                ),
                libc::EINVAL,
            ));
        }
        self.socket
            .ack(new_route(table, dst, gw, dev, src), CREATE_NEW)
            .map_err(|e| {
                e.into_error(format!(
                    "cannot add route {dst} via {gw:?} dev #{dev} table {table}"
                ))
            })
    }

    /// Adds the rule "from `source` lookup `table`" at `priority`.
    pub fn add_rule(&self, source: IpAddr, table: u32, priority: u32) -> Result<()> {
        let rule = Rule {
            table,
            source: Some(source),
            family: family_of(source),
            source_len: full_prefix(source),
            priority: Some(priority),
            action: RuleAction::ToTable,
        };
        self.socket
            .ack(RouteNetlinkMessage::NewRule(rule.message()), CREATE_NEW)
            .map_err(|e| e.into_error(format!("cannot add rule from {source} lookup {table}")))
    }

    /// Deletes the rules "from `source` lookup `table`"; none left is not an error.
    pub fn delete_rules_from(&self, source: IpAddr, table: u32) -> Result<()> {
        for rule in self.rules_in_table(table)? {
            if rule.source == Some(source) {
                self.delete_rule(&rule)?;
            }
        }
        Ok(())
    }

    /// The policy rules of every family (one RTM_GETRULE dump with AF_UNSPEC) that look up
    /// `table`.
    pub fn rules_in_table(&self, table: u32) -> Result<Vec<Rule>> {
        let replies = self
            .socket
            .dump(
                || RouteNetlinkMessage::GetRule(RuleMessage::default()),
                libc::RTM_NEWRULE,
            )
            .map_err(|e| e.into_error("cannot list policy rules".into()))?;
        Ok(replies
            .iter()
            .filter_map(|p| parse_rule_reply(p))
            .filter(|rule| rule.table == table)
            .collect())
    }

    /// Every address of this socket's namespace, with its flags.
    pub fn all_addresses(&self) -> Result<Vec<Addr>> {
        self.addresses_of(AddressFamily::Unspec)
            .map_err(|e| e.into_error("cannot list addresses".into()))
    }

    /// The addresses of link `index`.
    pub fn addresses(&self, index: u32) -> Result<Vec<IpNetwork>> {
        let all = self
            .addresses_of(AddressFamily::Unspec)
            .map_err(|e| e.into_error(format!("cannot list the addresses of link #{index}")))?;
        Ok(all
            .into_iter()
            .filter(|a| a.index == index)
            .filter_map(|a| IpNetwork::new(a.ip, a.prefix).ok())
            .collect())
    }

    /// The IPv6 addresses of link `index`, with their flags.
    pub fn addresses6(&self, index: u32) -> Result<Vec<Addr6>> {
        let all = self.addresses_of(AddressFamily::Inet6).map_err(|e| {
            e.into_error(format!("cannot list the IPv6 addresses of link #{index}"))
        })?;
        Ok(all
            .into_iter()
            .filter_map(Addr::v6)
            .filter(|a| a.index == index)
            .collect())
    }

    /// One RTM_GETADDR dump of `family` (the kernel filters by family; the caller by link).
    fn addresses_of(&self, family: AddressFamily) -> std::result::Result<Vec<Addr>, Failure> {
        let request = || {
            let mut message = AddressMessage::default();
            message.header.family = family;
            RouteNetlinkMessage::GetAddress(message)
        };
        let replies = self.socket.dump(request, libc::RTM_NEWADDR)?;
        Ok(replies.iter().filter_map(|p| parse_addr_reply(p)).collect())
    }

    /// The IPv6 default router learned on link `index` (from router advertisements), if any.
    pub fn default_router6(&self, index: u32) -> Result<Option<std::net::Ipv6Addr>> {
        Ok(self
            .routes(true)?
            .into_iter()
            .find_map(|r| match (r.dst.prefix(), r.oif, r.gateway) {
                (0, Some(oif), Some(IpAddr::V6(gw))) if oif == index => Some(gw),
                _ => None,
            }))
    }

    /// The kernel's route to `dst` for a packet from `src` (RTM_GETROUTE, as `ip route get DST
    /// from SRC`: the policy rules for `src` apply): its output link and gateway. None when
    /// the kernel has no route (ENETUNREACH, EHOSTUNREACH).
    pub fn route_to(&self, dst: IpAddr, src: IpAddr) -> Result<Option<RouteTo>> {
        let mut message = RouteMessage::default();
        message.header.address_family = family_of(dst);
        message.header.destination_prefix_length = full_prefix(dst);
        message.header.source_prefix_length = full_prefix(src);
        message
            .attributes
            .push(RouteAttribute::Destination(route_address(dst)));
        message
            .attributes
            .push(RouteAttribute::Source(route_address(src)));
        let what = || format!("cannot look up the route to {dst} from {src}");
        match self
            .socket
            .get(RouteNetlinkMessage::GetRoute(message), libc::RTM_NEWROUTE)
        {
            Ok(reply) => {
                let route = parse_route_reply(&reply).ok_or_else(|| {
                    malformed("an RTM_GETROUTE answer without a route").into_error(what())
                })?;
                Ok(route.oif.map(|oif| RouteTo {
                    oif,
                    gateway: route.gateway,
                }))
            }
            Err(Failure::Kernel(errno))
                if errno == libc::ENETUNREACH || errno == libc::EHOSTUNREACH =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into_error(what())),
        }
    }

    /// The neighbour table entry for `addr` on link `index` (one RTM_GETNEIGH dump of its
    /// family): the link-layer address it holds, if any, and its state. None without an entry.
    pub fn neighbour(&self, index: u32, addr: IpAddr) -> Result<Option<Neighbour>> {
        let request = || {
            let mut message = NeighbourMessage::default();
            message.header.family = family_of(addr);
            RouteNetlinkMessage::GetNeighbour(message)
        };
        let replies = self
            .socket
            .dump(request, libc::RTM_NEWNEIGH)
            .map_err(|e| e.into_error("cannot list the neighbour table".into()))?;
        Ok(replies
            .iter()
            .filter_map(|p| parse_neighbour_reply(p))
            .find(|(ifindex, dst, _)| *ifindex == index && *dst == addr)
            .map(|(_, _, n)| n))
    }

    /// The destinations of the routes of `family` in `table` (`0.0.0.0/0` or `::/0` for a
    /// default route).
    pub fn table_destinations(&self, table: u32, v6: bool) -> Result<Vec<IpNetwork>> {
        Ok(self
            .routes(v6)?
            .into_iter()
            .filter(|r| r.table == table)
            .map(|r| r.dst)
            .collect())
    }

    /// Every route of one family, of every table.
    fn routes(&self, v6: bool) -> Result<Vec<Route>> {
        let request = || {
            let mut message = RouteMessage::default();
            message.header.address_family = if v6 {
                AddressFamily::Inet6
            } else {
                AddressFamily::Inet
            };
            RouteNetlinkMessage::GetRoute(message)
        };
        let replies = self
            .socket
            .dump(request, libc::RTM_NEWROUTE)
            .map_err(|e| e.into_error("cannot list routes".into()))?;
        Ok(replies
            .iter()
            .filter_map(|p| parse_route_reply(p))
            .collect())
    }

    /// Deletes a rule by what identifies it (family, source, priority, table, action, as
    /// `ip rule del` sends them); one already gone is not an error.
    pub fn delete_rule(&self, rule: &Rule) -> Result<()> {
        match self
            .socket
            .ack(RouteNetlinkMessage::DelRule(rule.message()), 0)
        {
            Err(Failure::Kernel(errno)) if errno == libc::ENOENT => Ok(()),
            Err(e) => Err(e.into_error(format!(
                "cannot delete rule from {:?} lookup {}",
                rule.source, rule.table
            ))),
            Ok(()) => Ok(()),
        }
    }

    /// Deletes a link; a link that is already gone is not an error.
    pub fn delete_link(&self, index: u32) -> Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        match self.socket.ack(RouteNetlinkMessage::DelLink(link), 0) {
            Err(Failure::Kernel(errno)) if errno == libc::ENODEV => Ok(()),
            Err(e) => Err(e.into_error(format!("cannot delete link #{index}"))),
            Ok(()) => Ok(()),
        }
    }
}

impl Rule {
    /// The rule as a request: the header's 8-bit table is RT_TABLE_UNSPEC above 255 (as
    /// iproute2 sends it), the 32-bit FRA_TABLE always follows.
    fn message(&self) -> RuleMessage {
        let mut message = RuleMessage::default();
        message.header.family = self.family;
        message.header.src_len = self.source_len;
        message.header.table = header_table(self.table);
        message.header.action = self.action;
        if let Some(source) = self.source {
            message.attributes.push(RuleAttribute::Source(source));
        }
        if let Some(priority) = self.priority {
            message.attributes.push(RuleAttribute::Priority(priority));
        }
        message.attributes.push(RuleAttribute::Table(self.table));
        message
    }
}

/// RTM_GETLINK: by name (IFLA_IFNAME) or, without one, a dump; IFLA_EXT_MASK without the
/// link's counters.
fn getlink(name: Option<&str>) -> RouteNetlinkMessage {
    let mut link = LinkMessage::default();
    if let Some(name) = name {
        link.attributes
            .push(LinkAttribute::IfName(name.to_string()));
    }
    link.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    RouteNetlinkMessage::GetLink(link)
}

/// RTM_NEWLINK of an IPvlan L2 child `name` of link `master`, created in the namespace of
/// `netns_fd`.
fn ipvlan_l2(name: &str, master: u32, mtu: Option<u32>, netns_fd: RawFd) -> RouteNetlinkMessage {
    let mut link = LinkMessage::default();
    link.attributes
        .push(LinkAttribute::IfName(name.to_string()));
    link.attributes.push(LinkAttribute::Link(master));
    if let Some(mtu) = mtu {
        link.attributes.push(LinkAttribute::Mtu(mtu));
    }
    link.attributes.push(LinkAttribute::NetNsFd(netns_fd));
    link.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(netlink_packet_route::link::InfoKind::IpVlan),
        LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(IpVlanMode::L2)])),
    ]));
    RouteNetlinkMessage::NewLink(link)
}

/// RTM_NEWADDR: IFA_ADDRESS and IFA_LOCAL, and for IPv4 below /31 IFA_BROADCAST.
fn new_address(index: u32, addr: IpNetwork) -> RouteNetlinkMessage {
    let mut message = AddressMessage::default();
    message.header.family = family_of(addr.ip());
    message.header.prefix_len = addr.prefix();
    message.header.index = index;
    message
        .attributes
        .push(AddressAttribute::Address(addr.ip()));
    message.attributes.push(AddressAttribute::Local(addr.ip()));
    if let IpNetwork::V4(v4) = addr {
        if v4.prefix() < 31 {
            message
                .attributes
                .push(AddressAttribute::Broadcast(v4.broadcast()));
        }
    }
    RouteNetlinkMessage::NewAddress(message)
}

/// RTM_NEWROUTE of a static unicast route into `table` (RTA_TABLE, which holds tables above
/// 255), via `gw` (scope universe) or on-link (scope link), with preferred source `src`.
fn new_route(
    table: u32,
    dst: IpNetwork,
    gw: Option<IpAddr>,
    dev: u32,
    src: Option<IpAddr>,
) -> RouteNetlinkMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family_of(dst.ip());
    message.header.destination_prefix_length = dst.prefix();
    message.header.table = header_table(table);
    message.header.protocol = RouteProtocol::Static;
    message.header.scope = if gw.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    message.header.kind = RouteType::Unicast;
    if dst.prefix() > 0 {
        message
            .attributes
            .push(RouteAttribute::Destination(route_address(dst.network())));
    }
    if let Some(gw) = gw {
        message
            .attributes
            .push(RouteAttribute::Gateway(route_address(gw)));
    }
    message.attributes.push(RouteAttribute::Oif(dev));
    if let Some(src) = src {
        message
            .attributes
            .push(RouteAttribute::PrefSource(route_address(src)));
    }
    message.attributes.push(RouteAttribute::Table(table));
    RouteNetlinkMessage::NewRoute(message)
}

fn route_address(addr: IpAddr) -> RouteAddress {
    match addr {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

fn family_of(addr: IpAddr) -> AddressFamily {
    match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// A host prefix of `addr`'s family: 32 or 128.
fn full_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// A table as route and rule headers carry it: 8 bits, RT_TABLE_UNSPEC above 255 (as
/// iproute2 sends it); the 32-bit attribute (RTA_TABLE, FRA_TABLE) always follows.
fn header_table(table: u32) -> u8 {
    u8::try_from(table).unwrap_or(0)
}

/// The attributes after a message's fixed header of `header_len` bytes, through
/// netlink-packet-core's iterator; a malformed one ends them (what came before is kept).
fn attributes(payload: &[u8], header_len: usize) -> impl Iterator<Item = NlaBuffer<&[u8]>> {
    NlasIterator::new(payload.get(header_len..).unwrap_or_default()).map_while(|nla| nla.ok())
}

fn u32_of(value: &[u8]) -> Option<u32> {
    parse_u32(value).ok()
}

fn string_of(value: &[u8]) -> String {
    let text = value.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

/// An address of `family` from an attribute's bytes; None when the length does not match.
fn ip_of(family: AddressFamily, value: &[u8]) -> Option<IpAddr> {
    match family {
        AddressFamily::Inet => <[u8; 4]>::try_from(value).ok().map(IpAddr::from),
        AddressFamily::Inet6 => <[u8; 16]>::try_from(value).ok().map(IpAddr::from),
        _ => None,
    }
}

/// The [`Rule`] of an RTM_NEWRULE payload (`fib_rule_hdr`, then attributes): the table is
/// FRA_TABLE, else the header's 8-bit field. Each attribute is decoded alone by
/// netlink-packet-route (one it cannot decode is skipped). None when the header is short.
fn parse_rule_reply(payload: &[u8]) -> Option<Rule> {
    let header = RuleHeader::parse(payload).ok()?;
    let mut rule = Rule {
        table: u32::from(header.table),
        source: None,
        family: header.family,
        source_len: header.src_len,
        priority: None,
        action: header.action,
    };
    for nla in attributes(payload, header.buffer_len()) {
        match RuleAttribute::parse(&nla) {
            Ok(RuleAttribute::Table(table)) => rule.table = table,
            Ok(RuleAttribute::Source(source)) => rule.source = Some(source),
            Ok(RuleAttribute::Priority(priority)) => rule.priority = Some(priority),
            _ => {}
        }
    }
    Some(rule)
}

/// An address of an RTM_NEWADDR or RTM_DELADDR payload (`ifaddrmsg`, then attributes):
/// IFA_LOCAL (the local end of a point-to-point link), else IFA_ADDRESS; the 32-bit IFA_FLAGS,
/// which carries what the header's 8 bits cannot (e.g. MANAGETEMPADDR), else the header's.
/// None without an address, or with a prefix length longer than the address.
fn parse_addr_reply(payload: &[u8]) -> Option<Addr> {
    let header = AddressHeader::parse(payload).ok()?;
    let mut flags = AddressFlags::from_bits_retain(u32::from(header.flags.bits()));
    let (mut address, mut local) = (None, None);
    for nla in attributes(payload, header.buffer_len()) {
        let value = nla.value();
        match nla.kind() {
            libc::IFA_ADDRESS => address = ip_of(header.family, value),
            libc::IFA_LOCAL => local = ip_of(header.family, value),
            libc::IFA_FLAGS => {
                if let Some(bits) = u32_of(value) {
                    flags = AddressFlags::from_bits_retain(bits)
                }
            }
            _ => {}
        }
    }
    let ip = local.or(address)?;
    if header.prefix_len > full_prefix(ip) {
        return None;
    }
    Some(Addr {
        index: header.index,
        ip,
        prefix: header.prefix_len,
        flags,
    })
}

/// A route as the plugin reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    /// RTA_DST with the header's prefix length; the unspecified address when absent (a
    /// default route).
    dst: IpNetwork,
    table: u32,
    oif: Option<u32>,
    gateway: Option<IpAddr>,
}

/// The [`Route`] of an RTM_NEWROUTE payload (`rtmsg`, then attributes): the table is RTA_TABLE,
/// else the header's 8-bit field. None for a family other than IPv4 and IPv6, or a prefix
/// length longer than the address.
fn parse_route_reply(payload: &[u8]) -> Option<Route> {
    let header = RouteHeader::parse(payload).ok()?;
    let family = header.address_family;
    let unspecified = match family {
        AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    let mut route = Route {
        dst: IpNetwork::new(unspecified, 0).ok()?,
        table: u32::from(header.table),
        oif: None,
        gateway: None,
    };
    let mut dst = unspecified;
    for nla in attributes(payload, header.buffer_len()) {
        let value = nla.value();
        match nla.kind() {
            libc::RTA_DST => dst = ip_of(family, value)?,
            libc::RTA_OIF => route.oif = u32_of(value),
            libc::RTA_GATEWAY => route.gateway = ip_of(family, value),
            libc::RTA_TABLE => {
                if let Some(table) = u32_of(value) {
                    route.table = table
                }
            }
            _ => {}
        }
    }
    route.dst = IpNetwork::new(dst, header.destination_prefix_length).ok()?;
    Some(route)
}

/// A neighbour entry of an RTM_NEWNEIGH payload (`ndmsg`, then NDA_DST and NDA_LLADDR) as
/// (link, destination, entry); None without a destination.
fn parse_neighbour_reply(payload: &[u8]) -> Option<(u32, IpAddr, Neighbour)> {
    let header = NeighbourHeader::parse(payload).ok()?;
    let mut dst = None;
    let mut lladdr = None;
    // ndmsg: family, two pads, ifindex, state, flags, type: 12 bytes.
    for nla in attributes(payload, 12) {
        match nla.kind() {
            libc::NDA_DST => dst = ip_of(header.family, nla.value()),
            libc::NDA_LLADDR => lladdr = Some(nla.value().to_vec()),
            _ => {}
        }
    }
    let state = match header.state {
        NeighbourState::Incomplete => "incomplete",
        NeighbourState::Reachable => "reachable",
        NeighbourState::Stale => "stale",
        NeighbourState::Delay => "delay",
        NeighbourState::Probe => "probe",
        NeighbourState::Failed => "failed",
        NeighbourState::Noarp => "noarp",
        NeighbourState::Permanent => "permanent",
        _ => "none",
    };
    Some((
        header.ifindex,
        dst?,
        Neighbour {
            lladdr: lladdr.filter(|l| !l.is_empty()),
            state,
        },
    ))
}

/// The [`Link`] of an RTM_NEWLINK payload (`ifinfomsg`, then attributes), read lazily: the
/// header, then only the attributes `Link` holds. None when the payload is shorter than its
/// header.
fn parse_link_reply(payload: &[u8]) -> Option<Link> {
    let header = LinkHeader::parse(payload).ok()?;
    let mut link = Link {
        index: header.index,
        name: String::new(),
        mtu: 0,
        mac: Vec::new(),
        admin_up: header.flags.contains(LinkFlags::Up),
        kind: None,
        ipvlan_mode: None,
        parent: None,
        parent_elsewhere: false,
        alias: None,
    };
    for nla in attributes(payload, header.buffer_len()) {
        let value = nla.value();
        match nla.kind() {
            libc::IFLA_IFNAME => link.name = string_of(value),
            libc::IFLA_MTU => link.mtu = u32_of(value).unwrap_or(0),
            libc::IFLA_ADDRESS => link.mac = value.to_vec(),
            libc::IFLA_LINK => link.parent = u32_of(value),
            libc::IFLA_LINK_NETNSID => link.parent_elsewhere = true,
            libc::IFLA_IFALIAS => link.alias = Some(string_of(value)),
            libc::IFLA_LINKINFO => {
                let mut data = None;
                for info in attributes(value, 0) {
                    match info.kind() {
                        libc::IFLA_INFO_KIND => {
                            link.kind = Some(InfoKind::from(string_of(info.value()).as_str()))
                        }
                        libc::IFLA_INFO_DATA => data = Some(info),
                        _ => {}
                    }
                }
                // IFLA_INFO_DATA's attributes mean what the kind says they mean: each is
                // decoded alone by netlink-packet-route's IPvlan decoder.
                if link.kind == Some(InfoKind::IpVlan) {
                    link.ipvlan_mode = data
                        .iter()
                        .flat_map(|data| attributes(data.value(), 0))
                        .find_map(|nla| match InfoIpVlan::parse(&nla) {
                            Ok(InfoIpVlan::Mode(mode)) => Some(mode),
                            _ => None,
                        });
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// The reply parsers for the fuzz targets (fuzz/, docs/fuzzing.md), which call them with
/// arbitrary bytes: each returns what the plugin would take from that input, and none may
/// panic. Only in a build with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use super::*;
    pub use super::{Addr, Addr6, AddrEvent, Link};

    /// What an RTM_NEWLINK payload reads as.
    pub fn link(payload: &[u8]) -> Option<Link> {
        parse_link_reply(payload)
    }

    /// What an RTM_NEWADDR/RTM_DELADDR payload reads as.
    pub fn address(payload: &[u8]) -> Option<Addr> {
        parse_addr_reply(payload)
    }

    /// An RTM_NEWROUTE payload: its destination, table, output link and gateway.
    pub fn route(payload: &[u8]) -> Option<(IpNetwork, u32, Option<u32>, Option<IpAddr>)> {
        parse_route_reply(payload).map(|r| (r.dst, r.table, r.oif, r.gateway))
    }

    /// An RTM_NEWRULE payload: its table and source.
    pub fn rule(payload: &[u8]) -> Option<(u32, Option<IpAddr>)> {
        parse_rule_reply(payload).map(|r| (r.table, r.source))
    }

    /// The address events of a datagram sent by netlink port `sender`.
    pub fn address_events(sender: u32, datagram: &[u8]) -> Vec<AddrEvent> {
        super::address_events(sender, datagram)
    }

    /// The answer to request `seq` (replies of type `reply_type`) that these datagrams give,
    /// as a dump reads it: `None` while it is incomplete, the payloads when complete, an error
    /// string (with "interrupted" for NLM_F_DUMP_INTR) otherwise.
    pub fn answer(
        datagrams: &[&[u8]],
        seq: u32,
        reply_type: u16,
    ) -> Option<std::result::Result<Vec<Vec<u8>>, String>> {
        let mut answer = socket::Answer::default();
        for d in datagrams {
            match answer.feed(d, seq, Some(reply_type)) {
                Ok(true) if answer.interrupted => return Some(Err("interrupted".into())),
                Ok(true) => return Some(Ok(answer.replies)),
                Ok(false) => {}
                Err(e) => return Some(Err(format!("{e:?}"))),
            }
        }
        None
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;
    use libc::{
        IFA_ADDRESS, IFA_FLAGS, IFA_LOCAL, IFLA_ADDRESS, IFLA_IFALIAS, IFLA_IFNAME, IFLA_INFO_DATA,
        IFLA_INFO_KIND, IFLA_LINK, IFLA_LINKINFO, IFLA_LINK_NETNSID, IFLA_MTU, RTA_DST,
        RTA_GATEWAY, RTA_OIF, RTA_TABLE, RTM_DELADDR, RTM_NEWADDR, RTM_NEWLINK,
    };
    use netlink_packet_core::Parseable;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
    use socket::tests::message;

    /// IFLA_IPVLAN_MODE, the first attribute of an IPvlan link's IFLA_INFO_DATA: what
    /// netlink-packet-route emits for the mode.
    fn ipvlan_mode_attribute(mode: IpVlanMode) -> Vec<u8> {
        let mut buf = vec![0u8; InfoIpVlan::Mode(mode).buffer_len()];
        InfoIpVlan::Mode(mode).emit(&mut buf);
        buf
    }

    /// A request as netlink-packet-route decodes it, whole: the reference the typed
    /// requests are checked with.
    fn decoded(message: RouteNetlinkMessage) -> RouteNetlinkMessage {
        let bytes = socket::encode(message, NLM_F_REQUEST, 1);
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes)
            .expect("decodes")
            .payload
        {
            NetlinkPayload::InnerMessage(inner) => inner,
            other => panic!("{other:?}"),
        }
    }

    /// netlink-packet-route's decoding of a link, as the plugin's [`Link`]: the reference the
    /// hand reader is compared with.
    fn parse_link(msg: LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            mtu: 0,
            mac: Vec::new(),
            admin_up: msg.header.flags.contains(LinkFlags::Up),
            kind: None,
            ipvlan_mode: None,
            parent: None,
            parent_elsewhere: false,
            alias: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n,
                LinkAttribute::Mtu(m) => link.mtu = m,
                LinkAttribute::Address(a) => link.mac = a,
                LinkAttribute::Link(p) => link.parent = Some(p),
                LinkAttribute::LinkNetNsId(_) => link.parent_elsewhere = true,
                LinkAttribute::IfAlias(a) => link.alias = Some(a),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(k) => {
                                link.kind = Some(InfoKind::from(k.to_string().as_str()))
                            }
                            LinkInfo::Data(InfoData::IpVlan(data)) => {
                                for d in data {
                                    if let InfoIpVlan::Mode(m) = d {
                                        link.ipvlan_mode = Some(m);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(value);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    /// An RTM_NEWLINK payload: ifinfomsg (family, pad, type, index, flags, change), then
    /// attributes.
    fn newlink(index: u32, flags: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![0u8, 0];
        p.extend_from_slice(&1u16.to_ne_bytes()); // ARPHRD_ETHER
        p.extend_from_slice(&index.to_ne_bytes());
        p.extend_from_slice(&flags.to_ne_bytes());
        p.extend_from_slice(&0u32.to_ne_bytes());
        for a in attrs {
            p.extend_from_slice(a);
        }
        p
    }

    fn ipvlan_child() -> Vec<u8> {
        let info = [
            nla(IFLA_INFO_KIND, b"ipvlan\0"),
            nla(
                IFLA_INFO_DATA | 0x8000,
                &[
                    ipvlan_mode_attribute(IpVlanMode::L2),
                    // IFLA_IPVLAN_FLAGS
                    nla(2, &0u16.to_ne_bytes()),
                ]
                .concat(),
            ),
        ]
        .concat();
        newlink(
            7,
            0x1003, // IFF_UP | IFF_BROADCAST | IFF_MULTICAST
            &[
                nla(IFLA_IFNAME, b"net1\0"),
                nla(IFLA_MTU, &9000u32.to_ne_bytes()),
                nla(IFLA_ADDRESS, &[0x52, 0x54, 0, 0x0a, 0, 1]),
                nla(IFLA_LINK, &3u32.to_ne_bytes()),
                nla(IFLA_LINK_NETNSID, &0i32.to_ne_bytes()),
                nla(IFLA_IFALIAS, b"roce: rxe1 port 1 gid 1\0"),
                nla(IFLA_LINKINFO | 0x8000, &info),
                // An attribute the lookup does not read (IFLA_TXQLEN).
                nla(13, &1000u32.to_ne_bytes()),
            ],
        )
    }

    #[test]
    fn a_link_reads_as_netlink_packet_route_decodes_it() {
        for (payload, kind) in [
            (ipvlan_child(), Some(InfoKind::IpVlan)),
            (
                newlink(
                    2,
                    0,
                    &[
                        nla(IFLA_IFNAME, b"rdma1\0"),
                        nla(IFLA_MTU, &1500u32.to_ne_bytes()),
                    ],
                ),
                None,
            ),
        ] {
            let ours = parse_link_reply(&payload).expect("a whole message");
            let theirs = parse_link(LinkMessage::parse(&payload[..]).expect("decodes"));
            assert_eq!(ours, theirs);
            assert_eq!(ours.kind, kind);
        }
        let child = parse_link_reply(&ipvlan_child()).unwrap();
        assert_eq!(
            (child.index, child.name.as_str(), child.mtu, child.admin_up),
            (7, "net1", 9000, true)
        );
        assert_eq!(child.ipvlan_mode, Some(IpVlanMode::L2));
        assert_eq!((child.parent, child.parent_elsewhere), (Some(3), true));
        assert_eq!(child.mac_string(), "52:54:00:0a:00:01");
        assert!(parse_link_reply(&[0u8; 8]).is_none());
    }

    #[test]
    fn a_mode_attribute_of_another_kind_is_not_an_ipvlan_mode() {
        let info = [
            nla(IFLA_INFO_KIND, b"macvlan\0"),
            nla(IFLA_INFO_DATA, &nla(1, &4u32.to_ne_bytes())),
        ]
        .concat();
        let link = parse_link_reply(&newlink(5, 0, &[nla(IFLA_LINKINFO, &info)])).unwrap();
        assert_eq!(link.kind, Some(InfoKind::MacVlan));
        assert_eq!(link.ipvlan_mode, None);
    }

    #[test]
    fn the_link_request_names_the_link_and_skips_the_counters() {
        let RouteNetlinkMessage::GetLink(link) = decoded(getlink(Some("rdma1"))) else {
            panic!("not RTM_GETLINK");
        };
        assert_eq!(
            link.attributes,
            [
                LinkAttribute::IfName("rdma1".into()),
                LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats])
            ]
        );
    }

    #[test]
    fn the_ipvlan_child_request_has_its_parent_name_mode_and_namespace() {
        let RouteNetlinkMessage::NewLink(link) = decoded(ipvlan_l2("net1", 3, Some(9000), 7))
        else {
            panic!("not RTM_NEWLINK");
        };
        assert_eq!(link.header.index, 0);
        assert_eq!(
            link.attributes,
            [
                LinkAttribute::IfName("net1".into()),
                LinkAttribute::Link(3),
                LinkAttribute::Mtu(9000),
                LinkAttribute::NetNsFd(7),
                LinkAttribute::LinkInfo(vec![
                    LinkInfo::Kind(netlink_packet_route::link::InfoKind::IpVlan),
                    LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(IpVlanMode::L2)])),
                ]),
            ]
        );
    }

    #[test]
    fn the_address_and_route_requests_are_as_ip_sends_them() {
        let RouteNetlinkMessage::NewAddress(addr) =
            decoded(new_address(4, "10.9.0.2/16".parse().unwrap()))
        else {
            panic!("not RTM_NEWADDR");
        };
        assert_eq!(
            (
                addr.header.family,
                addr.header.prefix_len,
                addr.header.index
            ),
            (AddressFamily::Inet, 16, 4)
        );
        let ten = IpAddr::from([10, 9, 0, 2]);
        assert_eq!(
            addr.attributes,
            [
                AddressAttribute::Address(ten),
                AddressAttribute::Local(ten),
                AddressAttribute::Broadcast([10, 9, 255, 255].into()),
            ]
        );
        // No broadcast for IPv6 or a /31.
        for net in ["fd00::2/64", "10.0.0.0/31"] {
            let RouteNetlinkMessage::NewAddress(a) = decoded(new_address(4, net.parse().unwrap()))
            else {
                panic!("not RTM_NEWADDR");
            };
            assert_eq!(a.attributes.len(), 2, "{net}");
        }
        let src = IpAddr::from([10, 9, 0, 2]);
        let RouteNetlinkMessage::NewRoute(route) = decoded(new_route(
            10_004,
            "10.9.0.0/16".parse().unwrap(),
            None,
            4,
            Some(src),
        )) else {
            panic!("not RTM_NEWROUTE");
        };
        assert_eq!(
            route.header.table, 0,
            "RT_TABLE_UNSPEC: the table is the attribute's"
        );
        assert_eq!(route.header.scope, RouteScope::Link);
        assert_eq!(route.header.protocol, RouteProtocol::Static);
        assert_eq!(route.header.kind, RouteType::Unicast);
        assert_eq!(
            route.attributes,
            [
                RouteAttribute::Destination(RouteAddress::Inet([10, 9, 0, 0].into())),
                RouteAttribute::Oif(4),
                RouteAttribute::PrefSource(RouteAddress::Inet([10, 9, 0, 2].into())),
                RouteAttribute::Table(10_004),
            ]
        );
        let gw = IpAddr::from([10, 9, 0, 1]);
        let RouteNetlinkMessage::NewRoute(default) = decoded(new_route(
            254,
            "0.0.0.0/0".parse().unwrap(),
            Some(gw),
            4,
            None,
        )) else {
            panic!("not RTM_NEWROUTE");
        };
        assert_eq!(
            (default.header.table, default.header.scope),
            (254, RouteScope::Universe)
        );
        assert_eq!(
            default.attributes,
            [
                RouteAttribute::Gateway(RouteAddress::Inet([10, 9, 0, 1].into())),
                RouteAttribute::Oif(4),
                RouteAttribute::Table(254),
            ]
        );
    }

    #[test]
    fn a_rule_reads_back_as_the_rule_request_it_came_from() {
        let rule = Rule {
            table: 10_002,
            source: Some("10.23.0.5".parse().unwrap()),
            family: AddressFamily::Inet,
            source_len: 32,
            priority: Some(1000),
            action: RuleAction::ToTable,
        };
        let mut payload = vec![0u8; rule.message().buffer_len()];
        rule.message().emit(&mut payload);
        let read = parse_rule_reply(&payload).expect("a rule");
        assert_eq!((read.table, read.source), (10_002, rule.source));
        assert_eq!(read.message(), rule.message());
        assert_eq!(
            RuleMessage::parse(&payload[..]).unwrap(),
            rule.message(),
            "netlink-packet-route's full decoding agrees"
        );
        let RouteNetlinkMessage::DelRule(del) =
            decoded(RouteNetlinkMessage::DelRule(read.message()))
        else {
            panic!("not RTM_DELRULE");
        };
        assert_eq!(del.header.table, 0, "RT_TABLE_UNSPEC above 255");
        assert_eq!(del.header.src_len, 32);
        assert_eq!(del.header.action, RuleAction::ToTable);
    }

    #[test]
    fn a_rule_reads_its_table_from_the_header_without_fra_table() {
        // fib_rule_hdr: AF_INET, src_len 0, table 252 (the 8-bit field), action 1.
        let header = [2u8, 0, 0, 0, 252, 0, 0, 1, 0, 0, 0, 0];
        let rule = parse_rule_reply(&header).expect("a rule");
        assert_eq!((rule.table, rule.source), (252, None));
        assert!(parse_rule_reply(&[2, 0, 0]).is_none());
    }

    /// ifaddrmsg (family, prefix length, 8-bit flags, scope, index), then attributes.
    fn addr_payload(family: u8, prefix: u8, flags: u8, index: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![family, prefix, flags, 0];
        p.extend_from_slice(&index.to_ne_bytes());
        p.extend_from_slice(&attrs.concat());
        p
    }

    #[test]
    fn an_address_reads_its_flags_from_ifa_flags_and_prefers_the_local_end() {
        let six: std::net::Ipv6Addr = "fd00:1::5".parse().unwrap();
        // The 8-bit field says tentative; IFA_FLAGS (32 bits) also has MANAGETEMPADDR.
        let payload = addr_payload(
            10,
            64,
            0x40,
            7,
            &[
                nla(IFA_ADDRESS, &six.octets()),
                nla(IFA_FLAGS, &0x140u32.to_ne_bytes()),
            ],
        );
        let addr = parse_addr_reply(&payload).expect("an address");
        assert_eq!((addr.index, addr.ip, addr.prefix), (7, IpAddr::V6(six), 64));
        assert!(addr
            .flags
            .contains(AddressFlags::TENTATIVE | AddressFlags::MANAGETEMPADDR));
        // Without IFA_FLAGS, the header's; IFA_LOCAL wins over IFA_ADDRESS (a peer address).
        let p2p = addr_payload(
            2,
            32,
            0x80,
            3,
            &[
                nla(IFA_ADDRESS, &[10, 0, 0, 2]),
                nla(IFA_LOCAL, &[10, 0, 0, 1]),
            ],
        );
        let addr = parse_addr_reply(&p2p).expect("an address");
        assert_eq!(addr.ip, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(addr.flags, AddressFlags::PERMANENT);
        assert!(parse_addr_reply(&p2p[..7]).is_none());
        // A prefix longer than the address is no address.
        assert!(parse_addr_reply(&addr_payload(
            2,
            33,
            0,
            3,
            &[nla(IFA_LOCAL, &[10, 0, 0, 1])]
        ))
        .is_none());
        assert!(parse_addr_reply(&addr_payload(
            10,
            129,
            0,
            3,
            &[nla(IFA_ADDRESS, &six.octets())]
        ))
        .is_none());
        // No address at all: nothing to report.
        assert!(parse_addr_reply(&addr_payload(2, 24, 0, 3, &[])).is_none());
    }

    #[test]
    fn notifications_become_address_events_and_ipv4_ones_are_left_out() {
        let six: std::net::Ipv6Addr = "fe80::1".parse().unwrap();
        let new6 = addr_payload(10, 64, 0x40, 4, &[nla(IFA_ADDRESS, &six.octets())]);
        let new4 = addr_payload(2, 24, 0, 4, &[nla(IFA_ADDRESS, &[10, 0, 0, 1])]);
        let datagram = [
            message(RTM_NEWADDR, 0, 0, &new6),
            message(RTM_NEWADDR, 0, 0, &new4),
            message(RTM_DELADDR, 0, 0, &new6),
            message(RTM_NEWLINK, 0, 0, &ipvlan_child()),
        ]
        .concat();
        let want = Addr6 {
            index: 4,
            addr: six,
            prefix: 64,
            flags: AddressFlags::TENTATIVE,
        };
        assert_eq!(
            address_events(0, &datagram),
            [AddrEvent::New(want), AddrEvent::Del(want)]
        );
        // The same datagram from another port than the kernel's is no event at all.
        assert_eq!(address_events(4242, &datagram), []);
        // A truncated datagram yields what came before the cut.
        let cut = &datagram[..datagram.len() - 3];
        assert_eq!(address_events(0, cut).len(), 2);
    }

    /// Another process can send to the subscription's port (it is bound to a group, not
    /// connected to the kernel): such a datagram, here a forged RTM_NEWADDR of a finished
    /// address, must not end the SLAAC wait. Unprivileged: the socket is in the test's own
    /// namespace and nothing changes there.
    #[test]
    fn an_address_event_not_from_the_kernel_is_dropped() {
        let mut events = AddrEvents::subscribe_here().expect("subscribe");
        let mut addr = netlink_sys::SocketAddr::new(0, 0);
        events
            .socket
            .get_address(&mut addr)
            .expect("the subscription's address");
        let six: std::net::Ipv6Addr = "fd00:1::5".parse().unwrap();
        let forged = message(
            RTM_NEWADDR,
            0,
            0,
            &addr_payload(10, 64, 0x80, 7, &[nla(IFA_ADDRESS, &six.octets())]),
        );
        let mut sender =
            netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE).expect("socket");
        sender.bind_auto().expect("bind");
        sender
            .send_to(&forged, &addr, 0)
            .expect("a unicast to the subscription's port");
        let deadline = Instant::now() + std::time::Duration::from_millis(200);
        assert_eq!(events.next_until(deadline).expect("poll"), None);
    }

    #[test]
    fn a_route_reads_its_destination_table_device_and_gateway() {
        // rtmsg: AF_INET6, dst_len 0 (default), table RT_TABLE_MAIN in the 8-bit field.
        let header = [10u8, 0, 0, 0, 254, 9, 0, 1, 0, 0, 0, 0];
        let gw: std::net::Ipv6Addr = "fe80::1".parse().unwrap();
        let default = [
            header.to_vec(),
            nla(RTA_OIF, &5u32.to_ne_bytes()),
            nla(RTA_GATEWAY, &gw.octets()),
            nla(RTA_TABLE, &254u32.to_ne_bytes()),
        ]
        .concat();
        let route = parse_route_reply(&default).expect("a route");
        assert_eq!(route.dst, "::/0".parse::<IpNetwork>().unwrap());
        assert_eq!((route.table, route.oif), (254, Some(5)));
        assert_eq!(route.gateway, Some(IpAddr::V6(gw)));
        // IPv4, a /24 in table 10005 (only in RTA_TABLE).
        let v4 = [
            vec![2u8, 24, 0, 0, 0, 4, 253, 1, 0, 0, 0, 0],
            nla(RTA_DST, &[10, 88, 0, 0]),
            nla(RTA_TABLE, &10_005u32.to_ne_bytes()),
        ]
        .concat();
        let route = parse_route_reply(&v4).expect("a route");
        assert_eq!(route.dst, "10.88.0.0/24".parse::<IpNetwork>().unwrap());
        assert_eq!(
            (route.table, route.oif, route.gateway),
            (10_005, None, None)
        );
        // Another family (AF_MPLS) is skipped.
        assert!(parse_route_reply(&[28u8, 0, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0]).is_none());
    }

    #[test]
    fn a_table_above_255_goes_in_the_attribute_only() {
        assert_eq!(header_table(254), 254);
        assert_eq!(
            header_table(10_005),
            0,
            "RT_TABLE_UNSPEC, the table in the attribute"
        );
    }
}

/// Privileged: the verbs against the real kernel, in a namespace of their own on a Soft-RoCE
/// rail (`ROCE_TEST_RAIL`, default rdma2). `make vm-rust` runs them in the VM (`--ignored`);
/// each result is also read back with `ip`, not only with these same verbs.
#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn ip(args: &[&str]) -> String {
        let out = Command::new("ip").args(args).output().expect("ip");
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A network namespace at /run/netns/NAME, deleted when dropped.
    struct TestNs(String);

    impl TestNs {
        fn new(name: &str) -> (TestNs, Netns) {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
            ip(&["netns", "add", name]);
            let ns = Netns::open(Path::new(&format!("/run/netns/{name}"))).unwrap();
            (TestNs(name.into()), ns)
        }

        fn ip(&self, args: &[&str]) -> String {
            let mut all = vec!["-n", self.0.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        }
    }

    impl Drop for TestNs {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        }
    }

    fn rail() -> String {
        std::env::var("ROCE_TEST_RAIL").unwrap_or_else(|_| "rdma2".into())
    }

    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn link_verbs_create_rename_up_alias_delete() {
        let (t, ns) = TestNs::new("nlverbs1");
        let host = RouteSocket::current().unwrap();
        let pod = RouteSocket::open_in(&ns).unwrap();
        let master = host.link_by_name(&rail()).unwrap().expect("the rail");
        assert!(host.link_by_name("nlv-nothing").unwrap().is_none());

        host.create_ipvlan_l2("nlv0", master.index, Some(1400), &ns)
            .unwrap();
        // Created straight in the pod: never in the host.
        assert!(host.link_by_name("nlv0").unwrap().is_none());
        let child = pod.link_by_name("nlv0").unwrap().expect("the child");
        // The dump reads the link as the lookup by name does.
        assert_eq!(
            pod.links().unwrap().iter().find(|l| l.index == child.index),
            Some(&child)
        );
        assert_eq!(child.kind, Some(InfoKind::IpVlan));
        assert_eq!(child.ipvlan_mode, Some(IpVlanMode::L2));
        assert_eq!(child.parent, Some(master.index));
        assert_eq!(child.mtu, 1400);
        assert_eq!(child.mac, master.mac, "an IPvlan child has its rail's MAC");
        assert!(!child.admin_up);
        assert!(t
            .ip(&["-d", "link", "show", "nlv0"])
            .contains("ipvlan  mode l2"));

        // A second child of that name in the same pod is refused.
        let err = host
            .create_ipvlan_l2("nlv0", master.index, None, &ns)
            .unwrap_err();
        assert_eq!(err.netlink_errno(), Some(libc::EEXIST), "{err}");

        pod.rename(child.index, "nlv1").unwrap();
        pod.set_up(child.index).unwrap();
        pod.set_alias(child.index, "rdma_dev=x port=1").unwrap();
        let renamed = pod.link_by_name("nlv1").unwrap().unwrap();
        assert_eq!(renamed.index, child.index);
        assert!(renamed.admin_up);
        assert_eq!(renamed.alias.as_deref(), Some("rdma_dev=x port=1"));
        let shown = t.ip(&["link", "show", "nlv1"]);
        assert!(
            shown.contains("UP") && shown.contains("alias rdma_dev=x port=1"),
            "{shown}"
        );
        let links = pod.links().unwrap();
        let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["lo", "nlv1"]);

        pod.delete_link(child.index).unwrap();
        assert!(pod.link_by_name("nlv1").unwrap().is_none());
        assert_eq!(t.ip(&["-o", "link", "show"]).lines().count(), 1, "only lo");
        // Already gone is not an error.
        pod.delete_link(child.index).unwrap();
    }

    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn address_route_and_rule_verbs() {
        let (t, ns) = TestNs::new("nlverbs2");
        let host = RouteSocket::current().unwrap();
        let plain = RouteSocket::open_in(&ns).unwrap();
        // A second socket in the pod, for the reads.
        let pod = RouteSocket::open_in(&ns).unwrap();
        let master = host.link_by_name(&rail()).unwrap().expect("the rail");
        host.create_ipvlan_l2("nlv2", master.index, None, &ns)
            .unwrap();
        let child = plain.link_by_name("nlv2").unwrap().unwrap();

        let v4: IpNetwork = "10.88.0.5/24".parse().unwrap();
        let v6: IpNetwork = "fd00:88::5/64".parse().unwrap();
        // IPv6 is on by default in a new namespace, so the child takes the address.
        plain.add_address(child.index, v4).unwrap();
        plain.add_address(child.index, v6).unwrap();
        let err = plain.add_address(child.index, v4).unwrap_err();
        assert_eq!(err.netlink_errno(), Some(libc::EEXIST), "{err}");
        plain.set_up(child.index).unwrap();
        let mut addrs = pod.addresses(child.index).unwrap();
        addrs.retain(|a| !matches!(a, IpNetwork::V6(n) if n.ip().segments()[0] == 0xfe80));
        assert_eq!(addrs, [v4, v6]);
        let six = pod.addresses6(child.index).unwrap();
        assert!(
            six.iter()
                .any(|a| IpAddr::V6(a.addr) == v6.ip() && a.prefix == 64),
            "{six:?}"
        );
        assert!(t
            .ip(&["-4", "addr", "show", "nlv2"])
            .contains("inet 10.88.0.5/24 brd 10.88.0.255 scope global nlv2"));

        let table = 10_000 + child.index;
        let gw: IpAddr = "10.88.0.1".parse().unwrap();
        plain
            .add_route(
                table,
                "10.88.0.0/24".parse().unwrap(),
                None,
                child.index,
                Some(v4.ip()),
            )
            .unwrap();
        plain
            .add_route(
                table,
                "0.0.0.0/0".parse().unwrap(),
                Some(gw),
                child.index,
                None,
            )
            .unwrap();
        let v6_route: IpNetwork = "fd00:99::/64".parse().unwrap();
        plain
            .add_route(
                table,
                v6_route,
                Some("fe80::1".parse().unwrap()),
                child.index,
                None,
            )
            .unwrap();
        assert_eq!(pod.table_destinations(table, true).unwrap(), [v6_route]);
        // A gateway of the other family is refused before anything is sent.
        let err = plain
            .add_route(table, v6_route, Some(gw), child.index, None)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Netlink {
                    errno: libc::EINVAL,
                    ..
                }
            ),
            "{err}"
        );
        let mut dsts = pod.table_destinations(table, false).unwrap();
        dsts.sort();
        let want: Vec<IpNetwork> = vec![
            "0.0.0.0/0".parse().unwrap(),
            "10.88.0.0/24".parse().unwrap(),
        ];
        assert_eq!(dsts, want);
        let shown = t.ip(&["-4", "route", "show", "table", &table.to_string()]);
        assert!(shown.contains("default via 10.88.0.1 dev nlv2"), "{shown}");
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("10.88.0.0/24 dev nlv2 ")
                    && l.contains(" scope link src 10.88.0.5")),
            "{shown}"
        );

        plain.add_rule(v4.ip(), table, 1000).unwrap();
        plain.add_rule(v6.ip(), table, 1000).unwrap();
        let err = plain.add_rule(v4.ip(), table, 1000).unwrap_err();
        assert_eq!(err.netlink_errno(), Some(libc::EEXIST), "{err}");
        let shown = t.ip(&["-4", "rule", "show"]);
        // "lookup N" at the end: a rule whose action is not "to table" prints a trailing type.
        assert!(
            shown
                .lines()
                .any(|l| l.trim_end() == format!("1000:\tfrom 10.88.0.5 lookup {table}")),
            "{shown}"
        );
        let sources = |rules: Vec<Rule>| {
            let mut sources: Vec<_> = rules.into_iter().map(|r| r.source).collect();
            sources.sort();
            sources
        };
        assert_eq!(
            sources(pod.rules_in_table(table).unwrap()),
            [Some(v4.ip()), Some(v6.ip())]
        );
        plain.delete_rules_from(v4.ip(), table).unwrap();
        plain.delete_rules_from(v4.ip(), table).unwrap(); // already gone
        assert_eq!(sources(pod.rules_in_table(table).unwrap()), [Some(v6.ip())]);
        plain.delete_rules_from(v6.ip(), table).unwrap();
        assert!(pod.rules_in_table(table).unwrap().is_empty());
        assert!(!t.ip(&["-6", "rule", "show"]).contains(&table.to_string()));

        // The table's routes go with the link.
        plain.delete_link(child.index).unwrap();
        assert!(pod.table_destinations(table, false).unwrap().is_empty());
    }

    /// DEL's verbs on the plain socket: the child by name, its rules of both families from one
    /// dump, each deleted by its own message, then the link; read back with `ip`.
    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn route_socket_finds_and_removes_a_child_with_its_rules() {
        let (t, ns) = TestNs::new("nlverbs3");
        let host = RouteSocket::current().unwrap();
        let master = host.link_by_name(&rail()).unwrap().expect("the rail");
        host.create_ipvlan_l2("nlv3", master.index, None, &ns)
            .unwrap();
        let plain = RouteSocket::open_in(&ns).unwrap();
        let child = plain.link_by_name("nlv3").unwrap().expect("the child");
        assert_eq!(child.kind, Some(InfoKind::IpVlan));
        assert!(plain.link_by_name("nlv-nothing").unwrap().is_none());
        // A link of the host is not one of the pod's.
        assert!(plain.link_by_name(&rail()).unwrap().is_none());

        let table = 10_000 + child.index;
        let (v4, v6): (IpAddr, IpAddr) =
            ("10.89.0.5".parse().unwrap(), "fd00:89::5".parse().unwrap());
        plain.add_rule(v4, table, 1000).unwrap();
        plain.add_rule(v6, table, 1000).unwrap();
        plain.add_rule(v4, table + 1, 1000).unwrap();
        let mut ours = plain.rules_in_table(table).unwrap();
        ours.sort_by_key(|r| r.source);
        assert_eq!(
            ours.iter().map(|r| (r.table, r.source)).collect::<Vec<_>>(),
            [(table, Some(v4)), (table, Some(v6))]
        );
        for rule in &ours {
            plain.delete_rule(rule).unwrap();
            plain.delete_rule(rule).unwrap(); // already gone
        }
        assert!(plain.rules_in_table(table).unwrap().is_empty());
        let looks_up = |shown: &str, n: u32| {
            shown
                .lines()
                .any(|l| l.trim_end().ends_with(&format!("lookup {n}")))
        };
        let (four, six) = (t.ip(&["-4", "rule", "show"]), t.ip(&["-6", "rule", "show"]));
        assert!(
            !looks_up(&four, table) && !looks_up(&six, table),
            "{four}{six}"
        );
        assert!(
            looks_up(&four, table + 1),
            "the other table's rule stays: {four}"
        );

        plain.delete_link(child.index).unwrap();
        assert!(plain.link_by_name("nlv3").unwrap().is_none());
        assert_eq!(t.ip(&["-o", "link", "show"]).lines().count(), 1, "only lo");
        plain.delete_link(child.index).unwrap(); // already gone
    }

    /// The address subscription: an address added after it arrives as an event of its link,
    /// its removal too, and a quiet socket returns at the deadline.
    #[test]
    #[ignore = "privileged: run in the VM by make vm-rust"]
    fn address_events_follow_the_pod_and_stop_at_the_deadline() {
        let (_t, ns) = TestNs::new("nlverbs4");
        let host = RouteSocket::current().unwrap();
        let master = host.link_by_name(&rail()).unwrap().expect("the rail");
        let (mut events, plain) = AddrEvents::subscribe_with(&ns, RouteSocket::new).unwrap();
        let plain = plain.unwrap();
        host.create_ipvlan_l2("nlv4", master.index, None, &ns)
            .unwrap();
        let child = plain.link_by_name("nlv4").unwrap().unwrap();
        let v6: IpNetwork = "fd00:90::5/64".parse().unwrap();
        plain.add_address(child.index, v6).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let seen = loop {
            match events.next_until(deadline).unwrap() {
                Some(AddrEvent::New(a)) if IpAddr::V6(a.addr) == v6.ip() => break a,
                Some(_) => {}
                None => panic!("no event for {v6} within 5 s"),
            }
        };
        assert_eq!((seen.index, seen.prefix), (child.index, 64));
        assert_eq!(
            plain
                .addresses6(child.index)
                .unwrap()
                .iter()
                .find(|a| a.addr == seen.addr),
            Some(&seen),
            "the dump reads the address as the event does"
        );
        plain.delete_link(child.index).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match events.next_until(deadline).unwrap() {
                Some(AddrEvent::Del(a)) if a.addr == seen.addr => break,
                Some(_) => {}
                None => panic!("no removal of {v6} within 5 s"),
            }
        }
        let start = Instant::now();
        let quiet = events
            .next_until(start + std::time::Duration::from_millis(200))
            .unwrap();
        assert_eq!(quiet, None);
        assert!(start.elapsed() >= std::time::Duration::from_millis(200));
    }
}
