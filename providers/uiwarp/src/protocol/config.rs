//! Connection settings, and what the MPA handshake settled.

use crate::wire::fpdu;
use crate::wire::mpa::RtrKinds;
use rdmasock_verbs::QpNumber;
use std::time::Duration;

/// The largest IRD or ORD siw accepts; we clamp our own to it too.
pub const MAX_READ_DEPTH: u16 = 128;

/// The smallest maximum ULPDU we let a connection use.
pub const MIN_MULPDU: u16 = 64;

/// What a connection asks for and allows.
#[derive(Clone, Debug)]
pub struct Config {
    /// The QP number put in work completions.
    pub qp_number: QpNumber,
    /// Inbound RDMA READ depth: how many READ requests the peer may have outstanding at us.
    /// Clamped to [`MAX_READ_DEPTH`].
    pub ird: u16,
    /// Outbound RDMA READ depth: how many READs we keep outstanding. Clamped to
    /// [`MAX_READ_DEPTH`], and lowered to the peer's IRD by the handshake. An ORD of 0 still
    /// lets one READ out at a time, so that posted READs cannot stall forever.
    pub ord: u16,
    /// Request CRC32c (the C flag). CRC is used when either side asks for it.
    pub crc: bool,
    /// As the initiator, request RFC 6581 peer-to-peer mode (iWARP NICs require it).
    pub peer_to_peer: bool,
    /// As the initiator in peer-to-peer mode, the ready-to-receive operations offered.
    /// Default: WRITE and READ (siw picks WRITE).
    pub rtr_offer: RtrKinds,
    /// The largest ULPDU (DDP header + payload) of an FPDU we send. Use
    /// [`Config::mulpdu_for_mss`] to fit one FPDU into a TCP segment, as siw does.
    pub mulpdu: u16,
    /// How many send work requests may be outstanding.
    pub max_send_requests: usize,
    /// How many receive work requests may be posted.
    pub max_recv_requests: usize,
    /// How long the initiator waits for the MPA Reply (siw: 10 s).
    pub reply_timeout: Duration,
    /// How long the responder waits for the MPA Request (siw: 5 s).
    pub request_timeout: Duration,
    /// Without peer-to-peer mode, how long the responder holds its first FPDU after the reply
    /// unless a peer FPDU arrives first (siw reads the reply with nothing behind it).
    pub first_fpdu_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            qp_number: QpNumber(1),
            ird: 16,
            ord: 16,
            crc: true,
            peer_to_peer: true,
            rtr_offer: RtrKinds {
                send: false,
                write: true,
                read: true,
            },
            mulpdu: Config::mulpdu_for_mss(1460),
            max_send_requests: 256,
            max_recv_requests: 256,
            reply_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            first_fpdu_delay: Duration::from_millis(50),
        }
    }
}

impl Config {
    /// The largest ULPDU whose FPDU (length, pad, CRC included) fits `mss` bytes.
    pub fn mulpdu_for_mss(mss: usize) -> u16 {
        let mut ulpdu = mss.saturating_sub(fpdu::LENGTH_LEN + fpdu::CRC_LEN);
        while ulpdu > 0 && fpdu::frame_len(ulpdu) > mss {
            ulpdu -= 1;
        }
        u16::try_from(ulpdu.min(fpdu::MAX_ULPDU))
            .unwrap_or(u16::MAX)
            .max(MIN_MULPDU)
    }

    pub(crate) fn normalized(mut self) -> Config {
        self.ird = self.ird.min(MAX_READ_DEPTH);
        self.ord = self.ord.min(MAX_READ_DEPTH);
        self.mulpdu = self.mulpdu.max(MIN_MULPDU);
        self
    }
}

/// Which side of the MPA handshake a connection is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The TCP client: sends the MPA Request.
    Initiator,
    /// The TCP server: answers with the MPA Reply.
    Responder,
}

/// The zero-length operation that tells a peer-to-peer responder it may send.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rtr {
    /// A zero-length SEND.
    Send,
    /// A zero-length RDMA WRITE (siw's choice when offered).
    Write,
    /// A zero-length RDMA READ.
    Read,
}

impl Rtr {
    /// The responder's choice among the offered kinds, in siw's order: WRITE, READ, SEND.
    pub fn choose(offer: RtrKinds) -> Option<Rtr> {
        if offer.write {
            Some(Rtr::Write)
        } else if offer.read {
            Some(Rtr::Read)
        } else if offer.send {
            Some(Rtr::Send)
        } else {
            None
        }
    }

    pub(crate) fn kinds(self) -> RtrKinds {
        RtrKinds {
            send: self == Rtr::Send,
            write: self == Rtr::Write,
            read: self == Rtr::Read,
        }
    }
}

/// What the handshake settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The MPA revision in use.
    pub revision: u8,
    /// CRC32c in both directions.
    pub crc: bool,
    /// Our inbound READ depth.
    pub ird: u16,
    /// Our outbound READ depth.
    pub ord: u16,
    /// The ready-to-receive operation, in peer-to-peer mode.
    pub rtr: Option<Rtr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulpdu_fits_the_segment() {
        assert_eq!(Config::mulpdu_for_mss(1460), 1454);
        assert_eq!(fpdu::frame_len(1454), 1460);
        for mss in [100usize, 536, 1448, 1459, 8960, 70_000] {
            let m = usize::from(Config::mulpdu_for_mss(mss));
            assert!(fpdu::frame_len(m) <= mss.max(fpdu::frame_len(usize::from(MIN_MULPDU))));
            assert!(m == fpdu::MAX_ULPDU || fpdu::frame_len(m + 1) > mss);
        }
        assert_eq!(
            usize::from(Config::mulpdu_for_mss(10)),
            usize::from(MIN_MULPDU)
        );
    }

    #[test]
    fn rtr_choice_follows_siw() {
        let all = RtrKinds {
            send: true,
            write: true,
            read: true,
        };
        assert_eq!(Rtr::choose(all), Some(Rtr::Write));
        assert_eq!(
            Rtr::choose(RtrKinds {
                write: false,
                ..all
            }),
            Some(Rtr::Read)
        );
        assert_eq!(Rtr::choose(RtrKinds::default()), None);
    }
}
