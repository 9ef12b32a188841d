//! The one netlink socket of the plugin, for route netlink and RDMA netlink alike: plain and
//! blocking (every request is answered within the send), framed by netlink-packet-core. A
//! request is a typed message (netlink-packet-route's for route netlink, nldev.rs's for RDMA
//! netlink); the answer is the payloads of its replies, which the caller reads lazily, for the
//! attributes it needs.
//!
//! What the kernel answers is kept apart from what went wrong on the way: a request the kernel
//! refused is [`Failure::Kernel`] with its errno (a netlink error, code 102, or something the
//! caller expected, such as ENODEV for a link that is gone); a socket that failed, or a reply
//! that is not netlink, is [`Failure::Io`].

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use netlink_packet_core::{
    Emitable, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable, NLMSG_ALIGNTO, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN,
    NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};

use crate::protocol::error::Error;

/// Why a request got no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The kernel refused the request with this errno.
    Kernel(i32),
    /// The socket failed, or a reply was not what netlink promises.
    Io(io::Error),
}

impl Failure {
    /// As the crate reports it: a kernel errno as a netlink error (102), a failure of the
    /// socket itself as an I/O error.
    pub(crate) fn into_error(self, what: String) -> Error {
        match self {
            Failure::Kernel(errno) => Error::netlink(what, errno),
            Failure::Io(e) => Error::io(what, e),
        }
    }

    /// As an `io::Error` (the RDMA side reports these), the kernel's errno as the OS error.
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            Failure::Kernel(errno) => io::Error::from_raw_os_error(errno),
            Failure::Io(e) => e,
        }
    }
}

pub(crate) fn malformed(what: &str) -> Failure {
    Failure::Io(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed netlink reply: {what}"),
    ))
}

/// The kernel sizes a dump's datagrams after the reader's buffer, capped near 32 KiB, so
/// 64 KiB always holds a whole one; MSG_TRUNC shows when it did not.
pub(crate) const RECV_BUF_LEN: usize = 64 * 1024;

thread_local! {
    /// Each thread's receive buffer, kept for its every exchange: a buffer per exchange is an
    /// allocation the size musl's malloc maps and unmaps each time, an mmap and a munmap (a
    /// TLB shootdown across the other threads' CPUs) per request, under malloc's one lock.
    static RECV_BUF: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(RECV_BUF_LEN));
}

/// How often a dump the kernel marks interrupted (NLM_F_DUMP_INTR: the table changed while it
/// was read, so the parts may be inconsistent) is started again before giving up, as
/// containernetworking/plugins' netlinksafe does.
const DUMP_ATTEMPTS: usize = 10;

/// A netlink socket of one protocol, connected to the kernel (so that nothing but the kernel
/// can send to it), in the namespace of the thread that opened it.
pub(crate) struct Socket {
    socket: netlink_sys::Socket,
    seq: AtomicU32,
}

impl Socket {
    pub(crate) fn open(protocol: isize) -> io::Result<Socket> {
        let mut socket = netlink_sys::Socket::new(protocol)?;
        socket.bind_auto()?;
        socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        Ok(Socket {
            socket,
            seq: AtomicU32::new(0),
        })
    }

    /// Sends a change that the kernel answers with an ACK or an error; `flags` are added to
    /// NLM_F_REQUEST | NLM_F_ACK (NLM_F_CREATE | NLM_F_EXCL for a create).
    pub(crate) fn ack<M: NetlinkSerializable>(
        &self,
        message: M,
        flags: u16,
    ) -> Result<(), Failure> {
        self.exchange(message, NLM_F_ACK | flags, None).map(drop)
    }

    /// Sends a request that the kernel answers with one message of type `reply_type` (a
    /// lookup), and returns its payload.
    pub(crate) fn get<M: NetlinkSerializable>(
        &self,
        message: M,
        reply_type: u16,
    ) -> Result<Vec<u8>, Failure> {
        let (mut replies, _) = self.exchange(message, 0, Some(reply_type))?;
        replies
            .pop()
            .ok_or_else(|| malformed("no answer to a request"))
    }

    /// A dump: the payloads of every reply of type `reply_type`, up to NLMSG_DONE. A dump the
    /// kernel marks interrupted is read to its end and started again.
    pub(crate) fn dump<M: NetlinkSerializable>(
        &self,
        message: impl Fn() -> M,
        reply_type: u16,
    ) -> Result<Vec<Vec<u8>>, Failure> {
        until_complete(|| self.exchange(message(), NLM_F_DUMP, Some(reply_type)))
    }

    /// Sends `message` (numbered here) and collects the payloads of the replies of type
    /// `reply_type` to it, with whether the kernel marked any of them interrupted.
    fn exchange<M: NetlinkSerializable>(
        &self,
        message: M,
        flags: u16,
        reply_type: Option<u16>,
    ) -> Result<(Vec<Vec<u8>>, bool), Failure> {
        let seq = 1 + self.seq.fetch_add(1, Ordering::Relaxed);
        let request = encode(message, NLM_F_REQUEST | flags, seq);
        self.socket.send(&request, 0).map_err(Failure::Io)?;
        RECV_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let mut answer = Answer::default();
            loop {
                buf.clear();
                let len = self
                    .socket
                    .recv(&mut *buf, libc::MSG_TRUNC)
                    .map_err(Failure::Io)?;
                if len > buf.len() {
                    return Err(Failure::Io(io::Error::other(format!(
                        "a {len} byte netlink reply does not fit the {} byte buffer",
                        buf.len()
                    ))));
                }
                if answer.feed(&buf, seq, reply_type)? {
                    return Ok((answer.replies, answer.interrupted));
                }
            }
        })
    }
}

/// Runs a dump until the kernel answers it without NLM_F_DUMP_INTR, at most DUMP_ATTEMPTS
/// times.
fn until_complete(
    mut dump: impl FnMut() -> Result<(Vec<Vec<u8>>, bool), Failure>,
) -> Result<Vec<Vec<u8>>, Failure> {
    for _ in 0..DUMP_ATTEMPTS {
        let (replies, interrupted) = dump()?;
        if !interrupted {
            return Ok(replies);
        }
    }
    Err(Failure::Io(io::Error::other(format!(
        "the kernel interrupted the dump {DUMP_ATTEMPTS} times (NLM_F_DUMP_INTR: the table \
         kept changing while it was read)"
    ))))
}

/// A request as bytes: `nlmsghdr` (flags, sequence number) and the typed message.
pub(crate) fn encode<M: NetlinkSerializable>(message: M, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
    message.finalize();
    let mut buf = vec![0u8; message.buffer_len()];
    message.serialize(&mut buf);
    buf
}

/// The answer to one request, as its datagrams arrive.
#[derive(Default)]
pub(crate) struct Answer {
    pub(crate) replies: Vec<Vec<u8>>,
    pub(crate) interrupted: bool,
}

impl Answer {
    /// Feeds one datagram: keeps the payload of each reply of type `reply_type` to request
    /// `seq` (messages of other requests are skipped). True when the answer is complete:
    /// NLMSG_DONE (a dump's end), an ACK, or a reply without NLM_F_MULTI (a request's one
    /// answer); a kernel error is its errno.
    pub(crate) fn feed(
        &mut self,
        buf: &[u8],
        seq: u32,
        reply_type: Option<u16>,
    ) -> Result<bool, Failure> {
        for message in messages(buf) {
            let message = message?;
            if message.sequence_number() != seq {
                continue;
            }
            if message.flags() & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            let payload = message.payload();
            match message.message_type() {
                NLMSG_ERROR => {
                    let error = ErrorBuffer::new_checked(payload)
                        .map_err(|_| malformed("NLMSG_ERROR shorter than its errno"))?;
                    return match error.code() {
                        None => Ok(true),
                        Some(code) if code.get() < 0 => Err(kernel_errno(code.get())),
                        Some(_) => Err(malformed("NLMSG_ERROR with a positive errno")),
                    };
                }
                // A dump that fails after it started reports -errno in NLMSG_DONE's payload.
                NLMSG_DONE => {
                    return match payload.get(..4) {
                        Some(code) => {
                            match i32::from_ne_bytes([code[0], code[1], code[2], code[3]]) {
                                code if code < 0 => Err(kernel_errno(code)),
                                _ => Ok(true),
                            }
                        }
                        None => Ok(true),
                    }
                }
                NLMSG_NOOP => {}
                NLMSG_OVERRUN => {
                    return Err(Failure::Io(io::Error::other("netlink reported an overrun")))
                }
                t if Some(t) == reply_type => {
                    self.replies.push(payload.to_vec());
                    if message.flags() & NLM_F_MULTIPART == 0 {
                        return Ok(true);
                    }
                }
                _ => return Err(malformed("unexpected message type")),
            }
        }
        Ok(false)
    }
}

/// The kernel's `-errno` as a failure with its errno. i32::MIN has no errno (and no negation:
/// a debug build would panic on it, a release build wrap it; the fuzz smoke found it).
fn kernel_errno(negative: i32) -> Failure {
    match negative.checked_neg() {
        Some(errno) => Failure::Kernel(errno),
        None => malformed("an errno of i32::MIN"),
    }
}

/// The messages of a datagram, each checked by netlink-packet-core (its length within the
/// datagram); a bad length is an error and ends it.
pub(crate) fn messages(
    mut buf: &[u8],
) -> impl Iterator<Item = Result<NetlinkBuffer<&[u8]>, Failure>> {
    std::iter::from_fn(move || {
        if buf.len() < NetlinkHeader::default().buffer_len() {
            return None;
        }
        match NetlinkBuffer::new_checked(buf) {
            Ok(message) => {
                let len = message.length() as usize;
                let message = NetlinkBuffer::new(&buf[..len]);
                let align = usize::from(NLMSG_ALIGNTO);
                buf = &buf[len.next_multiple_of(align).min(buf.len())..];
                Some(Ok(message))
            }
            Err(_) => {
                buf = &[];
                Some(Err(malformed("message length out of bounds")))
            }
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A message as the kernel sends it.
    pub(crate) fn message(msg_type: u16, seq: u32, flags: u16, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&msg_type.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m
    }

    const REPLY: u16 = 16;

    fn answer(buf: &[u8]) -> Result<(bool, Vec<Vec<u8>>, bool), Failure> {
        let mut answer = Answer::default();
        answer
            .feed(buf, 5, Some(REPLY))
            .map(|done| (done, answer.replies, answer.interrupted))
    }

    #[test]
    fn the_replies_to_the_request_are_picked_and_errors_keep_their_errno() {
        let other = message(REPLY, 4, 0, b"them");
        let ours = message(REPLY, 5, 0, b"ours");
        assert_eq!(answer(&other).unwrap(), (false, vec![], false));
        let (done, replies, _) = answer(&[other.clone(), ours].concat()).unwrap();
        assert!(done);
        assert_eq!(replies, [b"ours".to_vec()]);
        // A dump: every NLM_F_MULTI part, then NLMSG_DONE.
        let part = message(REPLY, 5, NLM_F_MULTIPART, b"part");
        assert!(!answer(&[part.clone(), part.clone()].concat()).unwrap().0);
        let done = message(NLMSG_DONE, 5, NLM_F_MULTIPART, &0i32.to_ne_bytes());
        let dump = [part.clone(), part.clone(), done.clone()];
        assert_eq!(answer(&dump.concat()).unwrap().1.len(), 2);
        let ack = message(NLMSG_ERROR, 5, 0, &[0u8; 20]);
        assert_eq!(answer(&ack).unwrap(), (true, vec![], false));
        let mut enodev = (-libc::ENODEV).to_ne_bytes().to_vec();
        enodev.extend_from_slice(&[0u8; 16]);
        match answer(&message(NLMSG_ERROR, 5, 0, &enodev)) {
            Err(Failure::Kernel(errno)) => assert_eq!(errno, libc::ENODEV),
            other => panic!("{other:?}"),
        }
        // A dump that fails half-way: -errno in NLMSG_DONE.
        let failed = message(
            NLMSG_DONE,
            5,
            NLM_F_MULTIPART,
            &(-libc::EBUSY).to_ne_bytes(),
        );
        assert!(matches!(
            answer(&[part.clone(), failed].concat()),
            Err(Failure::Kernel(libc::EBUSY))
        ));
        let mut cut = message(REPLY, 5, 0, b"ours");
        cut[0..4].copy_from_slice(&4096u32.to_ne_bytes());
        assert!(matches!(answer(&cut), Err(Failure::Io(_))));
        assert!(matches!(
            answer(&message(REPLY + 1, 5, 0, &[0; 12])),
            Err(Failure::Io(_))
        ));
    }

    /// i32::MIN as the errno of NLMSG_ERROR or NLMSG_DONE: a malformed reply, not a panic.
    #[test]
    fn an_errno_without_a_negation_is_malformed() {
        let mut min = i32::MIN.to_ne_bytes().to_vec();
        min.extend_from_slice(&[0u8; 16]);
        assert!(matches!(
            answer(&message(NLMSG_ERROR, 5, 0, &min)),
            Err(Failure::Io(_))
        ));
        let done = message(NLMSG_DONE, 5, NLM_F_MULTIPART, &i32::MIN.to_ne_bytes());
        assert!(matches!(answer(&done), Err(Failure::Io(_))));
    }

    #[test]
    fn an_interrupted_dump_is_marked() {
        let part = message(REPLY, 5, NLM_F_MULTIPART | NLM_F_DUMP_INTR, b"part");
        let done = message(NLMSG_DONE, 5, NLM_F_MULTIPART, &0i32.to_ne_bytes());
        assert_eq!(
            answer(&[part, done].concat()).unwrap(),
            (true, vec![b"part".to_vec()], true)
        );
    }

    #[test]
    fn an_interrupted_dump_is_read_again_and_not_forever() {
        let mut answers = vec![
            (vec![b"new".to_vec()], false),
            (vec![b"old".to_vec()], true),
        ];
        let mut calls = 0;
        let replies = until_complete(|| {
            calls += 1;
            Ok(answers.pop().expect("asked once more than answered"))
        })
        .unwrap();
        assert_eq!((replies, calls), (vec![b"new".to_vec()], 2));
        let mut calls = 0;
        let err = until_complete(|| {
            calls += 1;
            Ok((vec![], true))
        })
        .unwrap_err();
        assert_eq!(calls, DUMP_ATTEMPTS);
        assert!(format!("{err:?}").contains("NLM_F_DUMP_INTR"), "{err:?}");
    }

    #[test]
    fn a_request_is_framed_by_netlink_packet_core() {
        use netlink_packet_route::link::LinkMessage;
        use netlink_packet_route::RouteNetlinkMessage;
        let req = encode(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            NLM_F_REQUEST,
            9,
        );
        let header = NetlinkBuffer::new_checked(&req[..]).unwrap();
        assert_eq!(header.length() as usize, req.len());
        assert_eq!(header.message_type(), libc::RTM_GETLINK);
        assert_eq!(header.flags(), NLM_F_REQUEST);
        assert_eq!(header.sequence_number(), 9);
    }
}
