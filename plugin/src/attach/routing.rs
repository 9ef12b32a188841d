//! Source-based routing, replacing the `sbr` step of the old chain.
//!
//! On a flat subnet every rail's child has a route to the same prefix, so the main table alone
//! would send all traffic out of one rail. Each child therefore gets its own table holding its
//! connected route(s) and the IPAM routes, and a rule `from <address> lookup <table>` per
//! address, IPv4 or IPv6. The table number is derived from the child's ifindex, which is unique
//! within the pod's namespace: concurrent ADDs into the same pod never pick the same table,
//! with no lock and no scan for a free number (sbr's scan can race).
//!
//! Unlike sbr, the kernel's connected route stays in the main table too, so that traffic that is
//! not bound to an address still reaches the rail subnet through a rail; IPAM routes (a default
//! route via the rail gateway, say) go only into the child's table, where they cannot take over
//! the pod's own default route.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::protocol::cni::{IpConfig, Route};

pub const TABLE_BASE: u32 = 10_000;
pub const RULE_PRIORITY: u32 = 1_000;
pub const MAIN_TABLE: u32 = libc::RT_TABLE_MAIN as u32;

pub fn table_for(ifindex: u32) -> u32 {
    TABLE_BASE + ifindex
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRoute {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    pub src: Option<IpAddr>,
    pub table: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub routes: Vec<PlannedRoute>,
    /// Source addresses that get `from <addr> lookup <table>`.
    pub rules: Vec<IpAddr>,
    pub table: Option<u32>,
}

/// What to install for a child with `ifindex`, given the IPAM addresses and routes. IPv4 and
/// IPv6 alike: each address gets its connected route in the child's table and a rule, and
/// every IPAM route goes into that table, so that a second rail with the same routes does not
/// collide with the first in main (EEXIST) and traffic from an address leaves by its own rail.
pub fn plan(ifindex: u32, ips: &[IpConfig], routes: &[Route], source_routing: bool) -> Plan {
    let table = (source_routing && !ips.is_empty()).then(|| table_for(ifindex));
    let mut plan = Plan {
        table,
        ..Plan::default()
    };
    if let Some(table) = table {
        for ip in ips {
            let net = IpNetwork::new(ip.address.network(), ip.address.prefix())
                .expect("a network of a valid prefix is valid");
            plan.routes.push(PlannedRoute {
                dst: net,
                gw: None,
                // An IPv6 address is still tentative (DAD) here, and the kernel refuses a
                // tentative preferred source; the rule picks the table by source anyway.
                src: ip.address.is_ipv4().then(|| ip.address.ip()),
                table,
            });
            plan.rules.push(ip.address.ip());
        }
    }
    for r in routes {
        // CNI: a route without "gw" goes via the gateway of the address of its family.
        let gw = r.gw.or_else(|| {
            ips.iter()
                .find(|ip| ip.address.is_ipv4() == r.dst.is_ipv4())
                .and_then(|ip| ip.gateway)
        });
        plan.routes.push(PlannedRoute {
            dst: r.dst,
            gw,
            src: None,
            table: table.unwrap_or(MAIN_TABLE),
        });
    }
    plan
}

/// Routing for the SLAAC address of a routed IPv6 rail: the on-link /64 and the rail router's
/// default route in the child's table, and `from <address> lookup <table>`. The kernel keeps its
/// own RA routes in the main table too, with the default route at a metric that loses to the
/// pod's own (sysctl.rs, `ra_defrtr_metric`). The copies here do not expire with the RA's router
/// lifetime; the SLAAC address itself still follows the RA's lifetimes.
pub fn slaac_plan(
    ifindex: u32,
    addr: ipnetwork::Ipv6Network,
    router: Option<std::net::Ipv6Addr>,
    source_routing: bool,
) -> Plan {
    if !source_routing {
        return Plan::default();
    }
    let table = table_for(ifindex);
    let on_link = ipnetwork::Ipv6Network::new(addr.network(), addr.prefix())
        .expect("a network of a valid prefix is valid");
    let mut routes = vec![PlannedRoute {
        dst: IpNetwork::V6(on_link),
        gw: None,
        src: None,
        table,
    }];
    if let Some(router) = router {
        routes.push(PlannedRoute {
            dst: "::/0".parse().expect("a valid prefix"),
            gw: Some(IpAddr::V6(router)),
            src: None,
            table,
        });
    }
    Plan {
        routes,
        rules: vec![IpAddr::V6(addr.ip())],
        table: Some(table),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            address: a.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: Some(0),
        }
    }

    fn route(dst: &str, gw: Option<&str>) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            gw: gw.map(|g| g.parse().unwrap()),
            extra: Default::default(),
        }
    }

    #[test]
    fn ipv4_gets_its_own_table_and_rule() {
        let p = plan(
            7,
            &[ip("10.9.0.7/16", Some("10.9.0.1"))],
            &[route("0.0.0.0/0", None)],
            true,
        );
        assert_eq!(p.table, Some(10_007));
        assert_eq!(p.rules, vec!["10.9.0.7".parse::<IpAddr>().unwrap()]);
        assert_eq!(p.routes[0].dst.to_string(), "10.9.0.0/16");
        assert_eq!(p.routes[0].table, 10_007);
        assert_eq!(p.routes[0].src, Some("10.9.0.7".parse().unwrap()));
        // The default route goes into the child's table, via the address's gateway.
        assert_eq!(p.routes[1].table, 10_007);
        assert_eq!(p.routes[1].gw, Some("10.9.0.1".parse().unwrap()));
    }

    #[test]
    fn off_means_main_table_and_no_rules() {
        let p = plan(
            7,
            &[ip("10.9.0.7/16", None)],
            &[route("10.10.0.0/16", Some("10.9.0.1"))],
            false,
        );
        assert_eq!(p.table, None);
        assert!(p.rules.is_empty());
        assert_eq!(p.routes.len(), 1);
        assert_eq!(p.routes[0].table, MAIN_TABLE);
    }

    #[test]
    fn ipv6_gets_the_same_table_rule_and_routes_as_ipv4() {
        let p = plan(
            3,
            &[ip("10.9.0.7/16", None), ip("fd01::7/64", Some("fd01::1"))],
            &[route("fd02::/64", None), route("::/0", Some("fd01::fe"))],
            true,
        );
        assert_eq!(p.table, Some(10_003));
        assert_eq!(
            p.rules,
            vec![
                "10.9.0.7".parse::<IpAddr>().unwrap(),
                "fd01::7".parse().unwrap()
            ]
        );
        let on_link = p.routes.iter().find(|r| r.dst.to_string() == "fd01::/64");
        assert_eq!(
            on_link,
            Some(&PlannedRoute {
                dst: "fd01::/64".parse().unwrap(),
                gw: None,
                src: None,
                table: 10_003
            })
        );
        let v6: Vec<_> = p.routes.iter().filter(|r| r.dst.is_ipv6()).collect();
        assert!(v6.iter().all(|r| r.table == 10_003), "{v6:?}");
        let via = v6
            .iter()
            .find(|r| r.dst.to_string() == "fd02::/64")
            .unwrap();
        assert_eq!(via.gw, Some("fd01::1".parse().unwrap()));
        // An IPv6-only attachment gets its table too.
        let p = plan(4, &[ip("fd01::8/64", None)], &[], true);
        assert_eq!(p.table, Some(10_004));
        assert_eq!(p.rules.len(), 1);
    }

    #[test]
    fn slaac_gets_on_link_and_default_in_its_table() {
        let p = slaac_plan(
            5,
            "2001:db8:1:2:5054:ff:fe00:1/64".parse().unwrap(),
            Some("fe80::1".parse().unwrap()),
            true,
        );
        assert_eq!(p.table, Some(10_005));
        assert_eq!(
            p.rules,
            vec!["2001:db8:1:2:5054:ff:fe00:1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(p.routes[0].dst.to_string(), "2001:db8:1:2::/64");
        assert_eq!(p.routes[1].dst.to_string(), "::/0");
        assert_eq!(p.routes[1].gw, Some("fe80::1".parse().unwrap()));
        assert_eq!(
            slaac_plan(5, "2001:db8::1/64".parse().unwrap(), None, false),
            Plan::default()
        );
    }

    #[test]
    fn tables_differ_per_interface() {
        assert_ne!(table_for(3), table_for(4));
    }
}
