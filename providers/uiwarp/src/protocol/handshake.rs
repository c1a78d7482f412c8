//! MPA connection setup: the request, the reply, IRD/ORD negotiation, peer-to-peer mode.

use super::config::{Config, Negotiated, Role, Rtr};
use super::connection::{Blame, Connection, Fault, Phase};
use super::event::{CloseReason, ConnectRequest, Established, Event};
use super::ProtocolError;
use crate::wire::mpa::{
    FrameKind, IrdOrd, MpaFrame, MpaRepr, RtrKinds, ENHANCED_LEN, HEADER_LEN, IRD_ORD_NO_VALUE,
    MAX_PRIVATE_DATA, REPLY_KEY, REQUEST_KEY, SIW_MAX_PRIVATE_DATA,
};
use crate::wire::rdmap::TerminateCode;
use std::time::Instant;

/// The most application private data one MPA frame carries (512 minus the IRD/ORD block).
pub const MAX_USER_PRIVATE_DATA: usize = MAX_PRIVATE_DATA - ENHANCED_LEN;
/// The most application private data siw accepts (256 minus the IRD/ORD block).
pub const SIW_MAX_USER_PRIVATE_DATA: usize = SIW_MAX_PRIVATE_DATA - ENHANCED_LEN;

/// The MPA revision we speak.
const REVISION: u8 = 2;

/// How many of a non-MPA peer's first bytes a handshake failure quotes.
const PREVIEW_LEN: usize = 32;

/// A parsed request kept while the application decides.
#[derive(Clone, Debug)]
pub(crate) struct PendingRequest {
    revision: u8,
    crc: bool,
    enhanced: Option<IrdOrd>,
    private_data: Vec<u8>,
}

/// Why an initiator fails when its peer answers with an MPA request.
const OTHER_REQUEST: &str = "an MPA request, not a reply: another initiator, or a service \
    that echoes what it gets, is on that port, not an iWARP listener";
/// Why a responder fails when its peer opens with an MPA reply.
const OTHER_REPLY: &str = "an MPA reply, not a request: it acts as a listener, not an initiator";

fn check_private_data(pd: &[u8]) -> Result<(), ProtocolError> {
    if pd.len() > MAX_USER_PRIVATE_DATA {
        return Err(ProtocolError::PrivateDataTooLong {
            len: pd.len(),
            max: MAX_USER_PRIVATE_DATA,
        });
    }
    Ok(())
}

fn value(v: u16) -> Option<u16> {
    (v != IRD_ORD_NO_VALUE).then_some(v)
}

impl Connection {
    /// A connection that starts as the MPA initiator (the TCP client): the MPA Request with
    /// `private_data` is ready to transmit; the reply must come by `now + reply_timeout`.
    pub fn initiator(
        config: Config,
        private_data: &[u8],
        now: Instant,
    ) -> Result<Connection, ProtocolError> {
        check_private_data(private_data)?;
        let deadline = now + config.reply_timeout;
        let mut c = Connection::new(config, Role::Initiator, Phase::AwaitReply { deadline });
        let offer = if c.config.peer_to_peer {
            c.config.rtr_offer
        } else {
            RtrKinds::default()
        };
        let request = MpaRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: c.config.crc,
            reject: false,
            revision: REVISION,
            enhanced: Some(IrdOrd {
                ird: c.config.ird,
                ord: c.config.ord,
                peer_to_peer: c.config.peer_to_peer && offer.count() > 0,
                rtr: offer,
            }),
            private_data,
        };
        c.control = request.to_vec();
        Ok(c)
    }

    /// A connection that starts as the MPA responder (the TCP server side): it waits for the
    /// request until `now + request_timeout`, then reports [`Event::ConnectRequest`].
    pub fn responder(config: Config, now: Instant) -> Connection {
        let deadline = now + config.request_timeout;
        Connection::new(config, Role::Responder, Phase::AwaitRequest { deadline })
    }

    /// Accepts the pending request, replying with `private_data`. In peer-to-peer mode the
    /// connection is established when the initiator's RTR arrives; otherwise at once, with our
    /// first FPDU held until the peer's first FPDU or `now + first_fpdu_delay`.
    pub fn accept(&mut self, private_data: &[u8], now: Instant) -> Result<(), ProtocolError> {
        check_private_data(private_data)?;
        let Phase::AwaitAccept(req) = &self.phase else {
            return Err(ProtocolError::InvalidState {
                operation: "accept",
                state: self.phase.name(),
            });
        };
        let req = req.clone();
        let crc = self.config.crc || req.crc;
        let (ird, ord, rtr) = match req.enhanced {
            Some(e) => {
                let ord = value(e.ird).map_or(self.config.ord, |i| self.config.ord.min(i));
                let rtr = if e.peer_to_peer {
                    Rtr::choose(e.rtr)
                } else {
                    None
                };
                (self.config.ird, ord, rtr)
            }
            None => (self.config.ird, self.config.ord, None),
        };
        let reply = MpaRepr {
            kind: FrameKind::Reply,
            markers: false,
            crc,
            reject: false,
            revision: req.revision,
            enhanced: req.enhanced.map(|_| IrdOrd {
                ird,
                ord,
                peer_to_peer: rtr.is_some(),
                rtr: rtr.map(Rtr::kinds).unwrap_or_default(),
            }),
            private_data,
        };
        self.control.extend_from_slice(&reply.to_vec());
        self.crc = crc;
        let negotiated = Negotiated {
            revision: req.revision,
            crc,
            ird,
            ord,
            rtr,
        };
        self.negotiated = Some(negotiated.clone());
        let established = Established {
            private_data: req.private_data,
            negotiated,
        };
        if rtr.is_some() {
            self.phase = Phase::AwaitRtr(Box::new(established));
        } else {
            self.phase = Phase::Established;
            self.hold_until = Some(now + self.config.first_fpdu_delay);
            self.events.push_back(Event::Established(established));
        }
        Ok(())
    }

    /// Rejects the pending request: an MPA Reply with R set and `private_data`, then the
    /// connection is over.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), ProtocolError> {
        check_private_data(private_data)?;
        let Phase::AwaitAccept(req) = &self.phase else {
            return Err(ProtocolError::InvalidState {
                operation: "reject",
                state: self.phase.name(),
            });
        };
        let reply = self.reject_frame(req.revision, req.crc, req.enhanced.is_some(), private_data);
        self.control.extend_from_slice(&reply);
        self.enter_error(Blame::None, 0);
        self.events.push_back(Event::Closed(CloseReason::Rejected));
        Ok(())
    }

    fn reject_frame(&self, revision: u8, crc: bool, enhanced: bool, pd: &[u8]) -> Vec<u8> {
        MpaRepr {
            kind: FrameKind::Reply,
            markers: false,
            crc: crc || self.config.crc,
            reject: true,
            revision,
            enhanced: enhanced.then_some(IrdOrd {
                ird: 0,
                ord: 0,
                peer_to_peer: false,
                rtr: RtrKinds::default(),
            }),
            private_data: pd,
        }
        .to_vec()
    }

    /// Consumes a request or reply from the front of `rx`; returns the bytes used (0 when more
    /// are needed or the connection failed).
    pub(crate) fn handshake_input(&mut self, rx: &[u8]) -> usize {
        let expected: &[u8] = if self.role == Role::Initiator {
            &REPLY_KEY
        } else {
            &REQUEST_KEY
        };
        // Judge the key and PD_Length as soon as they are here, before buffering a body.
        let have = rx.len().min(expected.len());
        if rx[..have] != expected[..have] {
            let (other, what) = if self.role == Role::Initiator {
                (&REQUEST_KEY, OTHER_REQUEST)
            } else {
                (&REPLY_KEY, OTHER_REPLY)
            };
            let why = if rx[..have] == other[..have] {
                if have < other.len() {
                    // Which of the two it is shows in a few more bytes.
                    return 0;
                }
                format!("the peer sent {what}")
            } else {
                // Another service on the port is the usual cause: its first words say which.
                format!(
                    "the peer's first bytes are not an MPA frame key: it sent \"{}\"; is \
                     something other than an iWARP peer listening there?",
                    rx[..rx.len().min(PREVIEW_LEN)].escape_ascii()
                )
            };
            self.handshake_failed(&why);
            return 0;
        }
        let Some(len) = MpaFrame::<&[u8]>::frame_len(rx) else {
            return 0;
        };
        if len - HEADER_LEN > MAX_PRIVATE_DATA {
            self.handshake_failed("the MPA frame's private data is longer than 512 bytes");
            return 0;
        }
        if rx.len() < len {
            return 0;
        }
        let frame = MpaFrame::new_unchecked(&rx[..len]);
        let repr = match MpaRepr::parse(&frame) {
            Ok(r) => r,
            Err(e) => {
                self.handshake_failed(&e.to_string());
                return 0;
            }
        };
        let ok = if self.role == Role::Initiator {
            self.on_reply(&repr)
        } else {
            self.on_request(&repr)
        };
        if ok {
            len
        } else {
            0
        }
    }

    fn on_request(&mut self, repr: &MpaRepr<'_>) -> bool {
        let problem = if repr.revision == 0 || repr.revision > REVISION {
            Some("the MPA request's revision is not 1 or 2")
        } else if repr.markers {
            Some("the MPA request asks for markers, which we (like siw) do not support")
        } else if repr.reject {
            Some("the MPA request has the reject flag set")
        } else {
            None
        };
        if let Some(p) = problem {
            self.handshake_failed(p);
            return false;
        }
        let request = PendingRequest {
            revision: repr.revision,
            crc: repr.crc,
            enhanced: repr.enhanced,
            private_data: repr.private_data.to_vec(),
        };
        self.events.push_back(Event::ConnectRequest(ConnectRequest {
            private_data: request.private_data.clone(),
            revision: repr.revision,
            crc: repr.crc,
            ird: repr.enhanced.and_then(|e| value(e.ird)),
            ord: repr.enhanced.and_then(|e| value(e.ord)),
            peer_to_peer: repr.enhanced.is_some_and(|e| e.peer_to_peer),
        }));
        self.phase = Phase::AwaitAccept(request);
        true
    }

    fn on_reply(&mut self, repr: &MpaRepr<'_>) -> bool {
        if repr.reject {
            self.events.push_back(Event::Rejected {
                private_data: repr.private_data.to_vec(),
            });
            self.enter_error(Blame::None, 0);
            self.control.clear();
            self.events.push_back(Event::Closed(CloseReason::Rejected));
            return false;
        }
        let asked_p2p = self.config.peer_to_peer && self.config.rtr_offer.count() > 0;
        let mut rtr = None;
        let mut ord = self.config.ord;
        let problem = if repr.revision == 0 || repr.revision > REVISION {
            Some("the MPA reply's revision is not 1 or 2")
        } else if repr.markers {
            Some("the MPA reply turns markers on, which we never asked for")
        } else if let Some(e) = repr.enhanced {
            if let Some(i) = value(e.ird) {
                ord = ord.min(i);
            }
            if e.peer_to_peer {
                let chosen = Rtr::choose(e.rtr);
                let offered = self.config.rtr_offer;
                let fits = chosen.is_some_and(|r| {
                    let k = r.kinds();
                    (k.send && offered.send)
                        || (k.write && offered.write)
                        || (k.read && offered.read)
                });
                rtr = chosen;
                if !asked_p2p {
                    Some("the MPA reply sets peer-to-peer mode we did not ask for")
                } else if e.rtr.count() != 1 || !fits {
                    Some("the MPA reply does not pick exactly one of the RTR operations we offered")
                } else {
                    None
                }
            } else {
                None
            }
        } else {
            None
        };
        if let Some(p) = problem {
            let code = if p.contains("RTR") {
                TerminateCode::LLP_NO_MATCHING_RTR
            } else {
                TerminateCode::LLP_INVALID_REQUEST_REPLY
            };
            self.crc = self.config.crc || repr.crc;
            self.fail(Fault::new(code, p));
            return false;
        }
        let negotiated = Negotiated {
            revision: repr.revision,
            crc: self.config.crc || repr.crc,
            ird: self.config.ird,
            ord,
            rtr,
        };
        self.crc = negotiated.crc;
        self.negotiated = Some(negotiated.clone());
        self.rtr_to_send = rtr;
        self.phase = Phase::Established;
        self.events.push_back(Event::Established(Established {
            private_data: repr.private_data.to_vec(),
            negotiated,
        }));
        true
    }

    /// A request or reply that cannot be used. A responder answers with a reject reply, and
    /// both send a TERMINATE (MPA layer, invalid request/reply) before closing.
    fn handshake_failed(&mut self, why: &str) {
        if self.role == Role::Responder {
            let reply = self.reject_frame(REVISION, false, true, &[]);
            self.control.extend_from_slice(&reply);
        }
        self.fail(Fault::new(
            TerminateCode::LLP_INVALID_REQUEST_REPLY,
            format!("MPA connection setup failed: {why}"),
        ));
    }
}
