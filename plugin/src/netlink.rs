//! A thin wrapper over rtnetlink with the plain verbs the plugin needs.
//!
//! A `Netlink` is bound to one network namespace: the one its socket was created in. For the
//! pod's namespace the socket is created on a short-lived thread inside it (netns.rs) and then
//! driven by the runtime on the main thread, which never changes namespace.

use std::net::IpAddr;

use futures::TryStreamExt;
use ipnetwork::IpNetwork;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, IpVlanMode, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{RouteScope, RouteType};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::AddressFamily;
use rtnetlink::{Handle, IpVersion, LinkIpVlan, LinkUnspec, RouteMessageBuilder};

use crate::error::{Error, Result};
use crate::netns::Netns;

pub struct Netlink {
    handle: Handle,
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

/// An IPv6 address of a link with the flags that tell SLAAC and DAD state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr6 {
    pub index: u32,
    pub addr: std::net::Ipv6Addr,
    pub prefix: u8,
    pub flags: AddressFlags,
}

/// A change of an IPv6 address, from the kernel's RTNLGRP_IPV6_IFADDR notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrEvent {
    New(Addr6),
    Del(Addr6),
}

/// A subscription to IPv6 address changes in one namespace.
pub struct AddrEvents {
    rx: futures::channel::mpsc::UnboundedReceiver<(
        netlink_packet_core::NetlinkMessage<netlink_packet_route::RouteNetlinkMessage>,
        netlink_sys::SocketAddr,
    )>,
}

impl AddrEvents {
    /// Subscribes in `ns`; events that happen after this call are not missed. `also` runs on
    /// the same thread in `ns` (one thread into the namespace for both), for another socket
    /// that must be opened there.
    pub fn subscribe_with<T: Send>(
        ns: &Netns,
        also: impl FnOnce() -> T + Send,
    ) -> Result<(AddrEvents, T)> {
        let runtime = tokio::runtime::Handle::current();
        let (subscribed, other) = ns.run(move || {
            let _guard = runtime.enter();
            let subscribed =
                rtnetlink::new_multicast_connection(&[rtnetlink::MulticastGroup::Ipv6Ifaddr]);
            (subscribed, also())
        })?;
        let (conn, _handle, rx) =
            subscribed.map_err(|e| Error::io("cannot subscribe to IPv6 address events", e))?;
        tokio::spawn(conn);
        Ok((AddrEvents { rx }, other))
    }

    /// The next address event; `None` if the subscription ended.
    pub async fn next(&mut self) -> Option<AddrEvent> {
        use futures::StreamExt;
        use netlink_packet_core::NetlinkPayload;
        use netlink_packet_route::RouteNetlinkMessage;
        while let Some((msg, _)) = self.rx.next().await {
            let event = match msg.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(m)) => {
                    parse_addr6(&m).map(AddrEvent::New)
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(m)) => {
                    parse_addr6(&m).map(AddrEvent::Del)
                }
                _ => None,
            };
            if event.is_some() {
                return event;
            }
        }
        None
    }
}

fn parse_addr6(m: &AddressMessage) -> Option<Addr6> {
    let addr = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(IpAddr::V6(ip)) => Some(*ip),
        _ => None,
    })?;
    // The 32-bit IFA_FLAGS attribute carries what the 8-bit header field cannot (e.g.
    // MANAGETEMPADDR); fall back to the header on kernels that omit it.
    let flags = m
        .attributes
        .iter()
        .find_map(|a| match a {
            AddressAttribute::Flags(f) => Some(*f),
            _ => None,
        })
        .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(m.header.flags.bits())));
    Some(Addr6 {
        index: m.header.index,
        addr,
        prefix: m.header.prefix_len,
        flags,
    })
}

/// A policy rule as the plugin cares about it.
#[derive(Debug, Clone)]
pub struct Rule {
    pub source: Option<IpAddr>,
    pub table: u32,
    message: RuleMessage,
}

impl Netlink {
    /// A socket in the calling thread's namespace. Must run inside the tokio runtime.
    pub fn current() -> Result<Netlink> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| Error::io("cannot open a netlink socket", e))?;
        tokio::spawn(conn);
        Ok(Netlink { handle })
    }

    /// A socket in `ns`. Must run inside the tokio runtime.
    pub fn in_netns(ns: &Netns) -> Result<Netlink> {
        let runtime = tokio::runtime::Handle::current();
        let (conn, handle, _) = ns
            .run(move || {
                // The socket registers with the runtime's reactor from this thread, and keeps
                // this thread's namespace after the thread is gone.
                let _guard = runtime.enter();
                rtnetlink::new_connection()
            })?
            .map_err(|e| {
                Error::io(
                    format!("cannot open a netlink socket in {}", ns.path().display()),
                    e,
                )
            })?;
        tokio::spawn(conn);
        Ok(Netlink { handle })
    }

    pub async fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        let mut links = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match links.try_next().await {
            Ok(msg) => Ok(msg.map(parse_link)),
            Err(e) if is_errno(&e, libc::ENODEV) => Ok(None),
            Err(e) => Err(Error::netlink(format!("cannot look up link {name}"), e)),
        }
    }

    /// Every link of this socket's namespace.
    pub async fn links(&self) -> Result<Vec<Link>> {
        self.handle
            .link()
            .get()
            .execute()
            .map_ok(parse_link)
            .try_collect()
            .await
            .map_err(|e| Error::netlink("cannot list links", e))
    }

    /// Creates an IPvlan L2 child of `master` (a link of this socket's namespace) directly in
    /// `target`, so it never appears in the host namespace.
    pub async fn create_ipvlan_l2(
        &self,
        name: &str,
        master: u32,
        mtu: Option<u32>,
        target: &Netns,
    ) -> Result<()> {
        use std::os::fd::AsRawFd;
        let mut builder =
            LinkIpVlan::new(name, master, IpVlanMode::L2).setns_by_fd(target.fd().as_raw_fd());
        if let Some(mtu) = mtu {
            builder = builder.mtu(mtu);
        }
        self.handle
            .link()
            .add(builder.build())
            .execute()
            .await
            .map_err(|e| {
                Error::netlink(
                    format!("cannot create IPvlan L2 child {name} of link #{master}"),
                    e,
                )
            })
    }

    pub async fn rename(&self, index: u32, name: &str) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).name(name).build();
        self.set_link(msg, || format!("cannot rename link #{index} to {name}"))
            .await
    }

    pub async fn set_up(&self, index: u32) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index).up().build();
        self.set_link(msg, || format!("cannot bring link #{index} up"))
            .await
    }

    pub async fn set_alias(&self, index: u32, alias: &str) -> Result<()> {
        let msg = LinkUnspec::new_with_index(index)
            .append_extra_attribute(LinkAttribute::IfAlias(alias.to_string()))
            .build();
        self.set_link(msg, || format!("cannot set the alias of link #{index}"))
            .await
    }

    async fn set_link(&self, msg: LinkMessage, what: impl FnOnce() -> String) -> Result<()> {
        self.handle
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| Error::netlink(what(), e))
    }

    /// Deletes a link; a link that is already gone is not an error.
    pub async fn delete_link(&self, index: u32) -> Result<()> {
        match self.handle.link().del(index).execute().await {
            Err(e) if !is_errno(&e, libc::ENODEV) => {
                Err(Error::netlink(format!("cannot delete link #{index}"), e))
            }
            _ => Ok(()),
        }
    }

    pub async fn add_address(&self, index: u32, addr: IpNetwork) -> Result<()> {
        self.handle
            .address()
            .add(index, addr.ip(), addr.prefix())
            .execute()
            .await
            .map_err(|e| Error::netlink(format!("cannot add address {addr} to link #{index}"), e))
    }

    pub async fn addresses(&self, index: u32) -> Result<Vec<IpNetwork>> {
        let msgs: Vec<_> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| {
                Error::netlink(format!("cannot list the addresses of link #{index}"), e)
            })?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(|m| {
                let ip = m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let ip = ip.or_else(|| {
                    m.attributes.iter().find_map(|a| match a {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                })?;
                IpNetwork::new(ip, m.header.prefix_len).ok()
            })
            .collect())
    }

    /// The IPv6 addresses of link `index`, with their flags.
    pub async fn addresses6(&self, index: u32) -> Result<Vec<Addr6>> {
        let mut req = self.handle.address().get().set_link_index_filter(index);
        req.message_mut().header.family = AddressFamily::Inet6;
        let msgs: Vec<_> = req.execute().try_collect().await.map_err(|e| {
            Error::netlink(
                format!("cannot list the IPv6 addresses of link #{index}"),
                e,
            )
        })?;
        Ok(msgs
            .iter()
            .filter_map(parse_addr6)
            .filter(|a| a.index == index)
            .collect())
    }

    /// The IPv6 default router learned on link `index` (from router advertisements), if any.
    pub async fn default_router6(&self, index: u32) -> Result<Option<std::net::Ipv6Addr>> {
        use netlink_packet_route::route::{RouteAddress, RouteAttribute};
        let routes = self.routes(true).await?;
        Ok(routes.iter().find_map(|r| {
            let oif = r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            });
            let gw = r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Gateway(RouteAddress::Inet6(g)) => Some(*g),
                _ => None,
            });
            (r.header.destination_prefix_length == 0 && oif == Some(index))
                .then_some(gw)
                .flatten()
        }))
    }

    /// Adds a route through link `dev` into `table`: via `gw` if given, else on-link.
    pub async fn add_route(
        &self,
        table: u32,
        dst: IpNetwork,
        gw: Option<IpAddr>,
        dev: u32,
        src: Option<IpAddr>,
    ) -> Result<()> {
        let what = || format!("cannot add route {dst} via {gw:?} dev #{dev} table {table}");
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst.network(), dst.prefix())
            .map_err(|e| invalid_route(dst, gw, e))?
            .output_interface(dev)
            .table_id(table)
            .kind(RouteType::Unicast);
        b = match gw {
            Some(g) => b
                .gateway(g)
                .map_err(|e| invalid_route(dst, gw, e))?
                .scope(RouteScope::Universe),
            None => b.scope(RouteScope::Link),
        };
        if let Some(src) = src {
            b = b.pref_source(src).map_err(|e| invalid_route(dst, gw, e))?;
        }
        self.handle
            .route()
            .add(b.build())
            .execute()
            .await
            .map_err(|e| Error::netlink(what(), e))
    }

    /// The destinations of the routes of `family` in `table` (`0.0.0.0/0` or `::/0` for a
    /// default route).
    pub async fn table_destinations(&self, table: u32, v6: bool) -> Result<Vec<IpNetwork>> {
        use netlink_packet_route::route::{RouteAddress, RouteAttribute};
        let routes = self.routes(v6).await?;
        Ok(routes
            .iter()
            .filter(|r| route_table(r) == table)
            .filter_map(|r| {
                let len = r.header.destination_prefix_length;
                let addr = r
                    .attributes
                    .iter()
                    .find_map(|a| match a {
                        RouteAttribute::Destination(RouteAddress::Inet(a)) => Some(IpAddr::V4(*a)),
                        RouteAttribute::Destination(RouteAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
                        _ => None,
                    })
                    .unwrap_or(if v6 {
                        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
                    });
                IpNetwork::new(addr, len).ok()
            })
            .collect())
    }

    async fn routes(&self, v6: bool) -> Result<Vec<netlink_packet_route::route::RouteMessage>> {
        let mut b = RouteMessageBuilder::<IpAddr>::new();
        b.get_mut().header.address_family = if v6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        self.handle
            .route()
            .get(b.build())
            .execute()
            .try_collect()
            .await
            .map_err(|e| Error::netlink("cannot list routes", e))
    }

    /// The rtnetlink handle, for read-only dumps that have no verb here (diagnose).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    pub async fn add_rule(&self, source: IpAddr, table: u32, priority: u32) -> Result<()> {
        let req = self
            .handle
            .rule()
            .add()
            .table_id(table)
            .priority(priority)
            .action(RuleAction::ToTable);
        let res = match source {
            IpAddr::V4(a) => req.v4().source_prefix(a, 32).execute().await,
            IpAddr::V6(a) => req.v6().source_prefix(a, 128).execute().await,
        };
        res.map_err(|e| Error::netlink(format!("cannot add rule from {source} lookup {table}"), e))
    }

    pub async fn rules(&self, v6: bool) -> Result<Vec<Rule>> {
        let version = if v6 { IpVersion::V6 } else { IpVersion::V4 };
        let msgs: Vec<RuleMessage> = self
            .handle
            .rule()
            .get(version)
            .execute()
            .try_collect()
            .await
            .map_err(|e| Error::netlink("cannot list policy rules", e))?;
        Ok(msgs.into_iter().map(parse_rule).collect())
    }

    /// Deletes a rule; one already gone is not an error.
    pub async fn delete_rule(&self, rule: &Rule) -> Result<()> {
        match self.handle.rule().del(rule.message.clone()).execute().await {
            Err(e) if !is_errno(&e, libc::ENOENT) => Err(Error::netlink(
                format!(
                    "cannot delete rule from {:?} lookup {}",
                    rule.source, rule.table
                ),
                e,
            )),
            _ => Ok(()),
        }
    }
}

fn invalid_route(dst: IpNetwork, gw: Option<IpAddr>, e: impl std::fmt::Debug) -> Error {
    Error::InvalidConfig(format!("route {dst} via {gw:?} is not valid: {e:?}"))
}

fn is_errno(e: &rtnetlink::Error, errno: i32) -> bool {
    crate::error::netlink_errno(e) == Some(errno)
}

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
        alias: None,
    };
    for attr in msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n,
            LinkAttribute::Mtu(m) => link.mtu = m,
            LinkAttribute::Address(a) => link.mac = a,
            LinkAttribute::Link(p) => link.parent = Some(p),
            LinkAttribute::IfAlias(a) => link.alias = Some(a),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    match info {
                        LinkInfo::Kind(k) => link.kind = Some(k),
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

fn parse_rule(message: RuleMessage) -> Rule {
    let mut table = u32::from(message.header.table);
    let mut source = None;
    for attr in &message.attributes {
        match attr {
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Source(s) => source = Some(*s),
            _ => {}
        }
    }
    Rule {
        source,
        table,
        message,
    }
}

fn route_table(msg: &netlink_packet_route::route::RouteMessage) -> u32 {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            netlink_packet_route::route::RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(msg.header.table))
}
