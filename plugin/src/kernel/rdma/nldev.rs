//! RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`): the port -> netdev binding and the
//! RDMA subsystem's netns mode. No crate covers it, so this is its own small typed layer (the
//! requests as [`Request`], the replies' attributes as [`Attrs`]) on the plugin's one netlink
//! socket and netlink-packet-core's framing (netlink.rs, socket.rs).
//!
//! The RDMA constants are from `include/uapi/rdma/rdma_netlink.h` (checked against
//! torvalds/linux, NVIDIA/NV-Kernels and iproute2's copy; `RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66`
//! also matches vishvananda/netlink); the netlink ones are netlink-packet-core's and libc's.
//! NLDEV messages carry no family header: attributes follow `nlmsghdr` directly, in host byte
//! order.

use std::io;

use netlink_packet_core::{
    Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, Nla, NlasIterator,
};

use super::RdmaPort;
use crate::kernel::netlink::socket::{Failure, Socket};

/// Client number; the message type is `RDMA_NL_GET_TYPE(client, op) = (client << 10) + op`.
const RDMA_NL_NLDEV: u16 = 5;

const RDMA_NLDEV_CMD_GET: u16 = 1;
const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;

const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1; // u32
const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2; // string
const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3; // u32
const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50; // u32
const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51; // string
const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66; // u8

/// An RDMA port and the netdev it is bound to, as RDMA netlink reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortNetdev {
    pub port: RdmaPort,
    /// None when the port has no netdev, or its netdev is in another netns than the socket
    /// (the kernel reports a port's netdev only to its own netns).
    pub ndev_index: Option<u32>,
    pub ndev_name: Option<String>,
}

/// How RDMA devices relate to network namespaces (`rdma system show netns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// Every netns sees every RDMA device (the default).
    Shared,
    /// Each RDMA device belongs to one netns.
    Exclusive,
}

/// Every port of every RDMA device visible from this thread's netns, with its netdev.
pub fn netlink_ports() -> io::Result<Vec<PortNetdev>> {
    let mut conn = Conn::open()?;
    let mut ports = Vec::new();
    for (index, name) in conn.devices()? {
        ports.extend(conn.ports(index, &name)?);
    }
    Ok(ports)
}

/// The port bound to the netdev `ifindex` of this thread's netns, or None. The devices named
/// in `first` are asked before the others and the walk stops at the first match, so a node
/// with 16 rails costs one device dump and, when `first` is right, one port dump.
pub fn port_of_ifindex(ifindex: u32, first: &[String]) -> io::Result<Option<PortNetdev>> {
    let mut conn = Conn::open()?;
    let mut devices = conn.devices()?;
    // Stable: the hinted devices first, each group in the kernel's order.
    devices.sort_by_key(|(_, name)| !first.contains(name));
    for (index, name) in devices {
        if let Some(found) = conn
            .ports(index, &name)?
            .into_iter()
            .find(|p| p.ndev_index == Some(ifindex))
        {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The ports of the RDMA device `name` (empty when there is no such device): one device dump
/// and one port dump, not a walk over every device.
pub fn device_ports(name: &str) -> io::Result<Vec<PortNetdev>> {
    let mut conn = Conn::open()?;
    match conn.devices()?.into_iter().find(|(_, n)| n == name) {
        Some((index, _)) => conn.ports(index, name),
        None => Ok(Vec::new()),
    }
}

/// The RDMA subsystem's netns mode. In exclusive mode an RDMA device belongs to one netns, so
/// pods cannot share the rail's device; callers check this before changing anything.
pub fn netns_mode() -> io::Result<NetnsMode> {
    let reply = Conn::open()?
        .socket
        .get(
            Request::new(RDMA_NLDEV_CMD_SYS_GET),
            nldev_type(RDMA_NLDEV_CMD_SYS_GET),
        )
        .map_err(|e| context(e.into_io(), "reading the RDMA netns mode"))?;
    parse_netns_mode(&Attrs::parse(&reply)?)
}

fn context(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("RDMA netlink, {what}: {err}"))
}

fn nldev_type(cmd: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + cmd
}

/// One RDMA netlink socket.
struct Conn {
    socket: Socket,
}

impl Conn {
    fn open() -> io::Result<Conn> {
        Ok(Conn {
            socket: Socket::open(libc::NETLINK_RDMA as isize)?,
        })
    }

    /// Index and name of every RDMA device.
    fn devices(&mut self) -> io::Result<Vec<(u32, String)>> {
        self.dump(|| Request::new(RDMA_NLDEV_CMD_GET))
            .map_err(|e| context(e, "listing RDMA devices"))?
            .iter()
            .map(device_handle)
            .collect()
    }

    /// The ports of one device. The port dump is per device: the kernel rejects it without
    /// DEV_INDEX.
    fn ports(&mut self, index: u32, name: &str) -> io::Result<Vec<PortNetdev>> {
        self.dump(|| {
            let mut request = Request::new(RDMA_NLDEV_CMD_PORT_GET);
            request.attrs.push(Attr::DevIndex(index));
            request
        })
        .map_err(|e| context(e, &format!("listing the ports of {name}")))?
        .iter()
        .map(port_netdev)
        .collect()
    }

    /// A dump of the command `request` makes, each reply's attributes.
    fn dump(&self, request: impl Fn() -> Request) -> io::Result<Vec<Attrs>> {
        let msg_type = request().message_type();
        self.socket
            .dump(request, msg_type)
            .map_err(Failure::into_io)?
            .iter()
            .map(|payload| Attrs::parse(payload))
            .collect()
    }
}

/// An NLDEV request: the command (its message type) and the attributes it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    cmd: u16,
    attrs: Vec<Attr>,
}

impl Request {
    fn new(cmd: u16) -> Request {
        Request {
            cmd,
            attrs: Vec::new(),
        }
    }
}

/// The request attributes the plugin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attr {
    DevIndex(u32),
}

impl Nla for Attr {
    fn value_len(&self) -> usize {
        match self {
            Attr::DevIndex(_) => 4,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Attr::DevIndex(_) => RDMA_NLDEV_ATTR_DEV_INDEX,
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Attr::DevIndex(index) => buffer.copy_from_slice(&index.to_ne_bytes()),
        }
    }
}

impl NetlinkSerializable for Request {
    fn message_type(&self) -> u16 {
        nldev_type(self.cmd)
    }

    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

/// Only requests are serialized; netlink-packet-core's message type asks for both halves.
impl NetlinkDeserializable for Request {
    type Error = io::Error;

    fn deserialize(_: &NetlinkHeader, _: &[u8]) -> Result<Self, Self::Error> {
        Err(io::Error::other("NLDEV replies are read as Attrs"))
    }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The attributes of one reply, in order; values are owned so they outlive the buffer.
#[derive(Debug, Default, PartialEq, Eq)]
struct Attrs(Vec<(u16, Vec<u8>)>);

impl Attrs {
    /// Parses a flat attribute stream through netlink-packet-core's iterator (NLDEV replies
    /// used here need no nesting; nested attributes are kept as opaque values). Stricter than
    /// route replies: a malformed attribute is an error, not the end of the stream.
    fn parse(data: &[u8]) -> io::Result<Attrs> {
        NlasIterator::new(data)
            .map(|nla| {
                let nla =
                    nla.map_err(|e| invalid(format!("malformed RDMA netlink attribute: {e}")))?;
                Ok((nla.kind(), nla.value().to_vec()))
            })
            .collect::<io::Result<_>>()
            .map(Attrs)
    }

    fn get(&self, attr_type: u16) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(t, _)| *t == attr_type)
            .map(|(_, value)| value.as_slice())
    }

    fn u8(&self, attr_type: u16) -> io::Result<Option<u8>> {
        self.get(attr_type)
            .map(|v| match v {
                [b] => Ok(*b),
                _ => Err(invalid(format!(
                    "attribute {attr_type}: expected 1 byte, found {}",
                    v.len()
                ))),
            })
            .transpose()
    }

    fn u32(&self, attr_type: u16) -> io::Result<Option<u32>> {
        self.get(attr_type)
            .map(|v| {
                netlink_packet_core::parse_u32(v).map_err(|_| {
                    invalid(format!(
                        "attribute {attr_type}: expected 4 bytes, found {}",
                        v.len()
                    ))
                })
            })
            .transpose()
    }

    /// A NUL-terminated string attribute.
    fn string(&self, attr_type: u16) -> io::Result<Option<String>> {
        self.get(attr_type)
            .map(|v| {
                let text = v.split(|&b| b == 0).next().unwrap_or_default();
                String::from_utf8(text.to_vec())
                    .map_err(|_| invalid(format!("attribute {attr_type}: not UTF-8: {text:?}")))
            })
            .transpose()
    }
}

fn missing(attr: &str) -> io::Error {
    invalid(format!("RDMA netlink reply without {attr}"))
}

/// (device index, device name) of an `RDMA_NLDEV_CMD_GET` reply.
fn device_handle(attrs: &Attrs) -> io::Result<(u32, String)> {
    let index = attrs
        .u32(RDMA_NLDEV_ATTR_DEV_INDEX)?
        .ok_or_else(|| missing("RDMA_NLDEV_ATTR_DEV_INDEX"))?;
    let name = attrs
        .string(RDMA_NLDEV_ATTR_DEV_NAME)?
        .ok_or_else(|| missing("RDMA_NLDEV_ATTR_DEV_NAME"))?;
    Ok((index, name))
}

/// An `RDMA_NLDEV_CMD_PORT_GET` reply.
fn port_netdev(attrs: &Attrs) -> io::Result<PortNetdev> {
    let (_, device) = device_handle(attrs)?;
    let port = attrs
        .u32(RDMA_NLDEV_ATTR_PORT_INDEX)?
        .ok_or_else(|| missing("RDMA_NLDEV_ATTR_PORT_INDEX"))?;
    Ok(PortNetdev {
        port: RdmaPort { device, port },
        ndev_index: attrs.u32(RDMA_NLDEV_ATTR_NDEV_INDEX)?,
        ndev_name: attrs.string(RDMA_NLDEV_ATTR_NDEV_NAME)?,
    })
}

/// An `RDMA_NLDEV_CMD_SYS_GET` reply.
fn parse_netns_mode(attrs: &Attrs) -> io::Result<NetnsMode> {
    match attrs.u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE)? {
        Some(0) => Ok(NetnsMode::Exclusive),
        Some(1) => Ok(NetnsMode::Shared),
        Some(other) => Err(invalid(format!("unknown RDMA netns mode {other}"))),
        None => Err(missing("RDMA_NLDEV_SYS_ATTR_NETNS_MODE")),
    }
}

/// The RDMA netlink reply parsers for the fuzz targets (fuzz/, docs/fuzzing.md). Only in a
/// build with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use super::*;

    /// What one datagram answers to request `seq` of type `msg_type`, each reply read as a
    /// device, a port and the netns mode: none may panic.
    pub fn replies(datagram: &[u8], seq: u32, msg_type: u16) -> io::Result<Vec<String>> {
        let mut answer = crate::kernel::netlink::socket::Answer::default();
        answer
            .feed(datagram, seq, Some(msg_type))
            .map_err(Failure::into_io)?;
        let out = answer
            .replies
            .iter()
            .map(|payload| Attrs::parse(payload))
            .collect::<io::Result<Vec<Attrs>>>()?;
        Ok(out
            .iter()
            .map(|attrs| {
                format!(
                    "{:?} {:?} {:?}",
                    device_handle(attrs).ok(),
                    port_netdev(attrs).ok(),
                    parse_netns_mode(attrs).ok()
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::netlink::socket::{encode, Answer};
    use netlink_packet_core::{
        NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLM_F_DUMP, NLM_F_MULTIPART as NLM_F_MULTI,
        NLM_F_REQUEST,
    };

    #[derive(Debug, PartialEq, Eq)]
    enum Progress {
        More,
        Done,
    }

    /// Feeds one datagram to the answer of request SEQ, as the socket does.
    fn collect_replies(
        buf: &[u8],
        seq: u32,
        msg_type: u16,
        out: &mut Vec<Attrs>,
    ) -> io::Result<Progress> {
        let mut answer = Answer::default();
        let done = answer
            .feed(buf, seq, Some(msg_type))
            .map_err(Failure::into_io)?;
        for payload in &answer.replies {
            out.push(Attrs::parse(payload)?);
        }
        Ok(if done { Progress::Done } else { Progress::More })
    }

    fn encode_request(msg_type: u16, flags: u16, seq: u32, attrs: &[Attr]) -> Vec<u8> {
        let cmd = msg_type - nldev_type(0);
        encode(
            Request {
                cmd,
                attrs: attrs.to_vec(),
            },
            flags,
            seq,
        )
    }

    const SEQ: u32 = 1;

    /// A netlink message built independently of `encode_request`.
    fn nlmsg(msg_type: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&msg_type.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes()); // the kernel's portid is ignored
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn nla(attr_type: u16, value: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&attr_type.to_ne_bytes());
        a.extend_from_slice(value);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn nla_u32(attr_type: u16, value: u32) -> Vec<u8> {
        nla(attr_type, &value.to_ne_bytes())
    }

    fn nla_str(attr_type: u16, value: &str) -> Vec<u8> {
        let mut v = value.as_bytes().to_vec();
        v.push(0);
        nla(attr_type, &v)
    }

    /// A PORT_GET reply shaped like fill_port_info(): handle, port, state, optional netdev.
    fn port_reply(dev_index: u32, dev: &str, port: u32, ndev: Option<(u32, &str)>) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend(nla_u32(RDMA_NLDEV_ATTR_DEV_INDEX, dev_index));
        p.extend(nla_str(RDMA_NLDEV_ATTR_DEV_NAME, dev));
        p.extend(nla_u32(RDMA_NLDEV_ATTR_PORT_INDEX, port));
        p.extend(nla(12, &[4])); // RDMA_NLDEV_ATTR_PORT_STATE, u8: padded, must be skipped
        p.extend(nla(13, &[5])); // RDMA_NLDEV_ATTR_PORT_PHYS_STATE
        if let Some((index, name)) = ndev {
            p.extend(nla_u32(RDMA_NLDEV_ATTR_NDEV_INDEX, index));
            p.extend(nla_str(RDMA_NLDEV_ATTR_NDEV_NAME, name));
        }
        nlmsg(nldev_type(RDMA_NLDEV_CMD_PORT_GET), NLM_F_MULTI, SEQ, &p)
    }

    fn done(code: i32) -> Vec<u8> {
        nlmsg(NLMSG_DONE, NLM_F_MULTI, SEQ, &code.to_ne_bytes())
    }

    fn error(code: i32) -> Vec<u8> {
        let mut payload = code.to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0u8; 16]); // echoed request header
        nlmsg(NLMSG_ERROR, 0, SEQ, &payload)
    }

    fn ports_of(buf: &[u8]) -> io::Result<(Progress, Vec<PortNetdev>)> {
        let mut out = Vec::new();
        let progress = collect_replies(buf, SEQ, nldev_type(RDMA_NLDEV_CMD_PORT_GET), &mut out)?;
        let ports = out.iter().map(port_netdev).collect::<io::Result<_>>()?;
        Ok((progress, ports))
    }

    #[test]
    fn message_types_follow_rdma_nl_get_type() {
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_GET), 0x1401);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_PORT_GET), (5 << 10) + 5);
        assert_eq!(nldev_type(RDMA_NLDEV_CMD_SYS_GET), 0x1406);
    }

    #[test]
    fn port_dump_request_bytes() {
        let req = encode_request(
            nldev_type(RDMA_NLDEV_CMD_PORT_GET),
            NLM_F_REQUEST | NLM_F_DUMP,
            7,
            &[Attr::DevIndex(3)],
        );
        let mut expected = Vec::new();
        expected.extend_from_slice(&24u32.to_ne_bytes()); // 16 header + 8 attribute
        expected.extend_from_slice(&0x1405u16.to_ne_bytes());
        expected.extend_from_slice(&0x0301u16.to_ne_bytes());
        expected.extend_from_slice(&7u32.to_ne_bytes());
        expected.extend_from_slice(&0u32.to_ne_bytes());
        expected.extend_from_slice(&8u16.to_ne_bytes());
        expected.extend_from_slice(&1u16.to_ne_bytes());
        expected.extend_from_slice(&3u32.to_ne_bytes());
        assert_eq!(req, expected);
    }

    #[test]
    fn parses_two_port_dump_with_and_without_netdev() {
        let mut buf = port_reply(0, "mlx5_0", 1, Some((7, "ens1f0np0")));
        buf.extend(port_reply(1, "rxe0", 1, None));
        buf.extend(done(0));
        let (progress, ports) = ports_of(&buf).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(
            ports,
            vec![
                PortNetdev {
                    port: RdmaPort {
                        device: "mlx5_0".into(),
                        port: 1
                    },
                    ndev_index: Some(7),
                    ndev_name: Some("ens1f0np0".into()),
                },
                PortNetdev {
                    port: RdmaPort {
                        device: "rxe0".into(),
                        port: 1
                    },
                    ndev_index: None,
                    ndev_name: None,
                },
            ]
        );
    }

    #[test]
    fn multipart_dump_continues_until_done() {
        let first = port_reply(0, "mlx5_0", 1, Some((7, "ens1f0np0")));
        let (progress, ports) = ports_of(&first).unwrap();
        assert_eq!(progress, Progress::More);
        assert_eq!(ports.len(), 1);
        let mut second = port_reply(0, "mlx5_0", 2, None);
        second.extend(done(0));
        let (progress, ports) = ports_of(&second).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(ports[0].port.port, 2);
    }

    #[test]
    fn nlmsg_error_becomes_errno_and_ack_ends() {
        let err = ports_of(&error(-22)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(22)); // EINVAL
        let (progress, ports) = ports_of(&error(0)).unwrap();
        assert_eq!(progress, Progress::Done);
        assert!(ports.is_empty());
        // A dump that fails midway reports -errno in NLMSG_DONE.
        let mut buf = port_reply(0, "mlx5_0", 1, None);
        buf.extend(done(-19));
        assert_eq!(ports_of(&buf).unwrap_err().raw_os_error(), Some(19));
    }

    #[test]
    fn single_reply_without_multi_ends_the_exchange() {
        let reply = nlmsg(
            nldev_type(RDMA_NLDEV_CMD_SYS_GET),
            0,
            SEQ,
            &[nla(RDMA_NLDEV_SYS_ATTR_NETNS_MODE, &[0]), nla(68, &[1])].concat(),
        );
        let mut out = Vec::new();
        let progress =
            collect_replies(&reply, SEQ, nldev_type(RDMA_NLDEV_CMD_SYS_GET), &mut out).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(parse_netns_mode(&out[0]).unwrap(), NetnsMode::Exclusive);
    }

    #[test]
    fn netns_mode_values() {
        let mode = |v: &[u8]| parse_netns_mode(&Attrs(vec![(66, v.to_vec())]));
        assert_eq!(mode(&[1]).unwrap(), NetnsMode::Shared);
        assert_eq!(mode(&[0]).unwrap(), NetnsMode::Exclusive);
        assert!(mode(&[2]).is_err());
        assert!(mode(&[1, 0, 0, 0]).is_err());
        assert!(parse_netns_mode(&Attrs::default()).is_err());
    }

    #[test]
    fn skips_other_sequence_numbers_and_noop() {
        let mut buf = nlmsg(NLMSG_NOOP, 0, SEQ, &[]);
        buf.extend(nlmsg(NLMSG_ERROR, 0, SEQ + 1, &(-1i32).to_ne_bytes()));
        buf.extend(port_reply(0, "mlx5_0", 1, None));
        buf.extend(done(0));
        let (progress, ports) = ports_of(&buf).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(ports.len(), 1);
    }

    #[test]
    fn attribute_type_flags_are_masked() {
        let attrs = Attrs::parse(&nla_u32(0x8000 | RDMA_NLDEV_ATTR_PORT_INDEX, 9)).unwrap();
        assert_eq!(attrs.u32(RDMA_NLDEV_ATTR_PORT_INDEX).unwrap(), Some(9));
    }

    #[test]
    fn malformed_input_is_invalid_data() {
        // Message length beyond the datagram.
        let mut buf = port_reply(0, "mlx5_0", 1, None);
        buf.truncate(buf.len() - 4);
        assert_eq!(
            ports_of(&buf).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // Attribute length beyond the message.
        let mut bad = nla_u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
        bad[0] = 40;
        assert!(Attrs::parse(&bad).is_err());
        // Attribute length below its header.
        assert!(Attrs::parse(&[2, 0, 1, 0]).is_err());
        // A u32 attribute of the wrong size.
        let attrs = Attrs::parse(&nla(RDMA_NLDEV_ATTR_PORT_INDEX, &[1, 0])).unwrap();
        assert!(attrs.u32(RDMA_NLDEV_ATTR_PORT_INDEX).is_err());
        // A reply of an unexpected type.
        let other = nlmsg(nldev_type(RDMA_NLDEV_CMD_GET), NLM_F_MULTI, SEQ, &[]);
        assert!(ports_of(&other).is_err());
        // A port reply without its port index.
        let no_port = nlmsg(
            nldev_type(RDMA_NLDEV_CMD_PORT_GET),
            NLM_F_MULTI,
            SEQ,
            &[
                nla_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0),
                nla_str(RDMA_NLDEV_ATTR_DEV_NAME, "x"),
            ]
            .concat(),
        );
        assert!(ports_of(&no_port).is_err());
    }

    #[test]
    #[ignore = "needs a kernel with RDMA netlink (ib_core loaded) and at least one RDMA device, e.g. rxe"]
    fn live_netlink_lists_ports_and_netns_mode() {
        let ports = netlink_ports().expect("RDMA netlink dump");
        assert!(!ports.is_empty(), "no RDMA port found");
        for p in &ports {
            assert!(p.port.port >= 1, "{p:?}");
        }
        netns_mode().expect("RDMA_NLDEV_CMD_SYS_GET");
    }
}
