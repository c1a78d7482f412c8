//! Inbound FPDUs: framing and CRC, DDP placement, RDMAP semantics.

use super::config::Rtr;
use super::connection::{
    Blame, Connection, Fault, InboundRead, Phase, ReceiveProgress, TaggedProgress,
};
use super::event::Event;
use super::memory::{AccessError, MemoryTable};
use crate::wire::ddp::{queue, Opcode, Segment, DDP_VERSION, RDMAP_VERSION, TAGGED_HEADER_LEN};
use crate::wire::fpdu::{self, Fpdu};
use crate::wire::rdmap::{Layer, ReadRequestRepr, TerminateCode, TerminateRepr, READ_REQUEST_LEN};
use rdmasock_verbs::{AccessFlags, RemoteKey, WcStatus};

type Step = Result<(), Fault>;

/// The DDP header fields of one segment, after the version and opcode checks.
struct Header {
    last: bool,
    opcode: Opcode,
    /// Tagged: STag and offset. Untagged: reserved ULP word, queue, MSN, MO.
    stag: u32,
    offset: u64,
    queue: u32,
    msn: u32,
}

fn tagged_fault(e: AccessError, what: &str) -> Fault {
    match e {
        AccessError::InvalidKey => Fault::new(
            TerminateCode::DDP_TAGGED_INVALID_STAG,
            format!("{what}: no memory region has this STag"),
        ),
        AccessError::OutOfBounds => Fault::new(
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            format!("{what}: the tagged offset and length fall outside the memory region"),
        ),
        AccessError::NotPermitted => Fault::new(
            TerminateCode::RDMAP_ACCESS_RIGHTS,
            format!("{what}: the memory region is not registered for remote write"),
        ),
    }
}

impl Connection {
    /// Consumes one FPDU from the front of `rx`; returns the bytes used (0 when more are
    /// needed or the connection failed).
    pub(crate) fn fpdu_input(&mut self, rx: &[u8], memory: &dyn MemoryTable) -> usize {
        if rx.len() < fpdu::LENGTH_LEN {
            return 0;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([rx[0], rx[1]]));
        if ulpdu_len < TAGGED_HEADER_LEN {
            self.fail(Fault::new(
                TerminateCode::LLP_FPDU,
                format!(
                    "an FPDU announces a ULPDU of {ulpdu_len} bytes, shorter than any DDP header"
                ),
            ));
            return 0;
        }
        let len = fpdu::frame_len(ulpdu_len);
        if rx.len() < len {
            return 0;
        }
        let frame = Fpdu::new_unchecked(&rx[..len]);
        if self.crc && !frame.crc_is_valid() {
            self.fail(Fault::new(
                TerminateCode::LLP_CRC,
                format!(
                    "an FPDU's CRC32c is {:#010x} but its contents give {:#010x}",
                    frame.crc_field(),
                    frame.compute_crc()
                ),
            ));
            return 0;
        }
        // The peer has spoken: the responder's first-FPDU hold is over.
        self.hold_until = None;
        if self.whole_message_input(frame.ulpdu(), memory) {
            return len;
        }
        match self.segment_input(frame.ulpdu(), memory) {
            Ok(()) => len,
            Err(mut fault) => {
                let seg = Segment::new_unchecked(frame.ulpdu());
                // A segment shorter than the header its T bit implies (an untagged one of
                // 14 to 17 bytes) has no header to copy: its TERMINATE goes without one.
                if fault.copy.is_none() && frame.ulpdu().len() >= seg.header_len() {
                    let header = seg.header().to_vec();
                    let body = (!seg.tagged()
                        && seg.opcode_raw() == Opcode::ReadRequest.to_raw()
                        && seg.payload().len() >= READ_REQUEST_LEN)
                        .then(|| seg.payload()[..READ_REQUEST_LEN].to_vec());
                    fault.copy = Some((ulpdu_len as u16, header, body));
                }
                self.fail(fault);
                0
            }
        }
    }

    fn segment_input(&mut self, ulpdu: &[u8], memory: &dyn MemoryTable) -> Step {
        let seg = Segment::new_checked(ulpdu).map_err(|e| {
            Fault::new(
                TerminateCode::LLP_FPDU,
                format!("a DDP segment is malformed: {e}"),
            )
        })?;
        let header = check_header(&seg)?;
        let payload = seg.payload();
        if let (Phase::AwaitRtr(_), false) = (&self.phase, header.opcode == Opcode::Terminate) {
            return self.rtr_input(&header, payload);
        }
        match header.opcode {
            Opcode::RdmaWrite => self.write_input(&header, payload, memory),
            Opcode::ReadResponse => self.read_response_input(&header, payload, memory),
            Opcode::ReadRequest => self.read_request_input(&header, payload, memory),
            Opcode::Terminate => {
                let code = TerminateRepr::parse(payload).map_or(
                    TerminateCode {
                        layer: Layer::Other(0x0f),
                        etype: 0x0f,
                        code: 0xff,
                    },
                    |t| t.code,
                );
                self.terminated_by_peer(code);
                Ok(())
            }
            _ => self.send_input(&header, payload, memory),
        }
    }

    /// A peer-to-peer responder's first FPDU must be the negotiated RTR.
    fn rtr_input(&mut self, h: &Header, payload: &[u8]) -> Step {
        let rtr = self.negotiated.as_ref().and_then(|n| n.rtr);
        let matches = match rtr {
            Some(Rtr::Write) => h.opcode == Opcode::RdmaWrite && h.last && payload.is_empty(),
            Some(Rtr::Send) => h.opcode.is_send() && h.last && payload.is_empty() && h.msn == 1,
            Some(Rtr::Read) => {
                h.opcode == Opcode::ReadRequest
                    && h.msn == 1
                    && payload.len() == READ_REQUEST_LEN
                    && ReadRequestRepr::parse(payload).is_ok_and(|r| r.size == 0)
            }
            None => false,
        };
        if !matches {
            return Err(Fault::new(
                TerminateCode::LLP_NO_MATCHING_RTR,
                format!(
                    "in peer-to-peer mode the first FPDU must be the zero-length {rtr:?} RTR, \
                     but a {:?} arrived",
                    h.opcode
                ),
            ));
        }
        match rtr {
            Some(Rtr::Send) => self.rx_msn[queue::SEND as usize] = 2,
            Some(Rtr::Read) => {
                self.rx_msn[queue::READ_REQUEST as usize] = 2;
                let r = ReadRequestRepr::parse(payload).map_err(|e| {
                    Fault::new(
                        TerminateCode::LLP_FPDU,
                        format!("the READ RTR is malformed: {e}"),
                    )
                })?;
                self.irq.push_back(InboundRead {
                    sink_stag: r.sink_stag,
                    sink_offset: r.sink_offset,
                    size: 0,
                    source_stag: r.source_stag,
                    source_offset: r.source_offset,
                });
            }
            _ => {}
        }
        let Phase::AwaitRtr(established) = std::mem::replace(&mut self.phase, Phase::Established)
        else {
            unreachable!("checked by the caller")
        };
        self.events.push_back(Event::Established(*established));
        Ok(())
    }

    fn tagged_continuity(&mut self, h: &Header, len: usize) -> Step {
        if let Some(t) = self.rx_tagged {
            if t.opcode != h.opcode {
                return Err(Fault::new(
                    TerminateCode::RDMAP_UNEXPECTED_OPCODE,
                    "a tagged message began in the middle of another tagged message",
                ));
            }
            if t.stag != h.stag {
                return Err(Fault::new(
                    TerminateCode::DDP_TAGGED_INVALID_STAG,
                    "a tagged segment changed STag in the middle of its message",
                ));
            }
            if t.next_offset != h.offset {
                return Err(Fault::new(
                    TerminateCode::DDP_TAGGED_BASE_BOUNDS,
                    "a tagged segment does not continue where the previous one ended",
                ));
            }
        }
        let next_offset = h.offset.checked_add(len as u64).ok_or_else(|| {
            Fault::new(
                TerminateCode::DDP_TAGGED_TO_WRAP,
                "a tagged offset wraps past 2^64",
            )
        })?;
        self.rx_tagged = (!h.last).then_some(TaggedProgress {
            opcode: h.opcode,
            stag: h.stag,
            next_offset,
        });
        Ok(())
    }

    fn write_input(&mut self, h: &Header, payload: &[u8], memory: &dyn MemoryTable) -> Step {
        self.tagged_continuity(h, payload.len())?;
        if payload.is_empty() {
            // Zero-length WRITEs are legal and their STag is not checked.
            return Ok(());
        }
        let region = memory
            .remote(RemoteKey(h.stag))
            .ok_or_else(|| tagged_fault(AccessError::InvalidKey, "RDMA WRITE"))?;
        region
            .write(h.offset, payload, AccessFlags::REMOTE_WRITE)
            .map_err(|e| tagged_fault(e, "RDMA WRITE"))
    }

    fn read_response_input(
        &mut self,
        h: &Header,
        payload: &[u8],
        memory: &dyn MemoryTable,
    ) -> Step {
        self.tagged_continuity(h, payload.len())?;
        let bad = |code, why: &str| {
            Fault::new(code, format!("RDMA READ response: {why}"))
                .blame(Blame::OldestRead(WcStatus::BadResponseError))
        };
        let Some(read) = self.orq.front_mut() else {
            return Err(Fault::new(
                TerminateCode::RDMAP_UNEXPECTED_OPCODE,
                "an RDMA READ response arrived with no READ outstanding",
            ));
        };
        if h.stag != read.sink_stag {
            return Err(bad(
                TerminateCode::DDP_TAGGED_INVALID_STAG,
                "its STag is not the READ's sink STag",
            ));
        }
        let expected = read.sink_offset.wrapping_add(u64::from(read.received));
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        if h.offset != expected || read.received.checked_add(len).is_none_or(|e| e > read.size) {
            return Err(bad(
                TerminateCode::DDP_TAGGED_BASE_BOUNDS,
                "it lands outside the READ's sink buffer",
            ));
        }
        if !payload.is_empty() {
            let sink = read.sink.ok_or_else(|| {
                bad(
                    TerminateCode::DDP_TAGGED_BASE_BOUNDS,
                    "data for a zero-length READ",
                )
            })?;
            let at = sink.addr.wrapping_add(u64::from(read.received));
            memory
                .local(sink.lkey)
                .ok_or(AccessError::InvalidKey)
                .and_then(|r| r.write(at, payload, AccessFlags::LOCAL_WRITE))
                .map_err(|_| {
                    Fault::new(
                        TerminateCode::RDMAP_LOCAL_CATASTROPHIC,
                        "the READ's sink buffer is no longer registered for local write",
                    )
                    .blame(Blame::OldestRead(WcStatus::LocalAccessError))
                })?;
        }
        read.received += len;
        if h.last {
            if read.received != read.size {
                return Err(bad(
                    TerminateCode::DDP_TAGGED_BASE_BOUNDS,
                    "the last segment came before the whole size was read",
                ));
            }
            let done = self.orq.pop_front().expect("front exists");
            if let Some(seq) = done.seq {
                self.finish_send(seq, WcStatus::Success, 0);
            }
        }
        Ok(())
    }

    fn check_untagged(&self, h: &Header, q: u32) -> Step {
        if h.queue != q {
            return Err(Fault::new(
                TerminateCode::DDP_UNTAGGED_INVALID_QN,
                format!(
                    "a {:?} arrived on untagged queue {} instead of {q}",
                    h.opcode, h.queue
                ),
            ));
        }
        if h.msn != self.rx_msn[q as usize] {
            return Err(Fault::new(
                TerminateCode::DDP_UNTAGGED_MSN_RANGE,
                format!(
                    "message sequence number {} on queue {q}, expected {}",
                    h.msn, self.rx_msn[q as usize]
                ),
            ));
        }
        Ok(())
    }

    fn read_request_input(&mut self, h: &Header, payload: &[u8], memory: &dyn MemoryTable) -> Step {
        self.check_untagged(h, queue::READ_REQUEST)?;
        if h.offset != 0 || !h.last || payload.len() != READ_REQUEST_LEN {
            return Err(Fault::new(
                TerminateCode::DDP_UNTAGGED_INVALID_MO,
                "an RDMA READ request must be one segment with a 28-byte body at offset 0",
            ));
        }
        let r = ReadRequestRepr::parse(payload).map_err(|e| {
            Fault::new(
                TerminateCode::LLP_FPDU,
                format!("an RDMA READ request is malformed: {e}"),
            )
        })?;
        let q = queue::READ_REQUEST as usize;
        self.rx_msn[q] = self.rx_msn[q].wrapping_add(1);
        let ird = self.negotiated.as_ref().map_or(0, |n| n.ird);
        if self.irq.len() >= usize::from(ird) {
            return Err(Fault::new(
                TerminateCode::RDMAP_CATASTROPHIC_STREAM,
                format!("the peer has more than IRD = {ird} RDMA READ requests outstanding"),
            ));
        }
        if r.size > 0 {
            let region = memory.remote(RemoteKey(r.source_stag)).ok_or_else(|| {
                Fault::new(
                    TerminateCode::RDMAP_INVALID_STAG,
                    "RDMA READ request: no memory region has the source STag",
                )
            })?;
            region
                .resolve(r.source_offset, u64::from(r.size), AccessFlags::REMOTE_READ)
                .map_err(|e| match e {
                    AccessError::NotPermitted => Fault::new(
                        TerminateCode::RDMAP_ACCESS_RIGHTS,
                        "RDMA READ request: the source region is not registered for remote read",
                    ),
                    _ if r.source_offset.checked_add(u64::from(r.size)).is_none() => Fault::new(
                        TerminateCode::RDMAP_TO_WRAP,
                        "RDMA READ request: the source offset wraps past 2^64",
                    ),
                    _ => Fault::new(
                        TerminateCode::RDMAP_BASE_BOUNDS,
                        "RDMA READ request: the source range falls outside the memory region",
                    ),
                })?;
        }
        self.irq.push_back(InboundRead {
            sink_stag: r.sink_stag,
            sink_offset: r.sink_offset,
            size: r.size,
            source_stag: r.source_stag,
            source_offset: r.source_offset,
        });
        Ok(())
    }

    fn send_input(&mut self, h: &Header, payload: &[u8], memory: &dyn MemoryTable) -> Step {
        self.check_untagged(h, queue::SEND)?;
        let expected = self.rx_send.as_ref().map_or(0, |p| p.received);
        if u64::from(expected) != h.offset {
            return Err(Fault::new(
                TerminateCode::DDP_UNTAGGED_INVALID_MO,
                format!(
                    "a SEND segment at message offset {}, expected {expected}",
                    h.offset
                ),
            ));
        }
        let mut progress = match self.rx_send.take() {
            Some(p) => p,
            None => match self.rq.pop_front() {
                Some(work) => ReceiveProgress { work, received: 0 },
                None => return Err(Fault::new(
                    TerminateCode::DDP_UNTAGGED_NO_BUFFER,
                    "a SEND arrived with no receive posted (iWARP has no RNR: post receives first)",
                )),
            },
        };
        let end = u64::from(progress.received) + payload.len() as u64;
        if end > progress.work.capacity().min(u64::from(u32::MAX)) {
            self.rx_send = Some(progress);
            return Err(Fault::new(
                TerminateCode::DDP_UNTAGGED_TOO_LONG,
                format!("a SEND of at least {end} bytes does not fit the posted receive"),
            )
            .blame(Blame::Receive(WcStatus::LocalLengthError)));
        }
        if let Err(e) = scatter(
            memory,
            &progress.work,
            u64::from(progress.received),
            payload,
        ) {
            self.rx_send = Some(progress);
            return Err(Fault::new(
                TerminateCode::RDMAP_LOCAL_CATASTROPHIC,
                format!("a receive's scatter list cannot be written ({e:?}): check its lkeys and LOCAL_WRITE"),
            )
            .blame(Blame::Receive(WcStatus::LocalProtectionError)));
        }
        progress.received = end as u32;
        if !h.last {
            self.rx_send = Some(progress);
            return Ok(());
        }
        self.rx_msn[queue::SEND as usize] = self.rx_msn[queue::SEND as usize].wrapping_add(1);
        let invalidated = match h.opcode {
            Opcode::SendWithInvalidate | Opcode::SendWithSolicitedEventAndInvalidate => h.stag,
            _ => 0,
        };
        let solicited = matches!(
            h.opcode,
            Opcode::SendWithSolicitedEvent | Opcode::SendWithSolicitedEventAndInvalidate
        );
        self.push_recv_completion(
            progress.work.wr_id,
            WcStatus::Success,
            progress.received,
            invalidated,
            solicited,
            0,
        );
        Ok(())
    }
}

/// Checks versions, opcode and the T bit as siw does, and reads the header.
fn check_header(seg: &Segment<&[u8]>) -> Result<Header, Fault> {
    if seg.ddp_version() != DDP_VERSION {
        let code = if seg.tagged() {
            TerminateCode::DDP_TAGGED_VERSION
        } else {
            TerminateCode::DDP_UNTAGGED_VERSION
        };
        return Err(Fault::new(
            code,
            format!("DDP version {} (not 1)", seg.ddp_version()),
        ));
    }
    if seg.rdmap_version() != RDMAP_VERSION {
        return Err(Fault::new(
            TerminateCode::RDMAP_VERSION,
            format!("RDMAP version {} (not 1)", seg.rdmap_version()),
        ));
    }
    let opcode = Opcode::from_raw(seg.opcode_raw())
        .filter(|o| o.is_tagged() == seg.tagged())
        .ok_or_else(|| {
            Fault::new(
                TerminateCode::RDMAP_UNEXPECTED_OPCODE,
                format!(
                    "RDMAP opcode {} in a{} segment",
                    seg.opcode_raw(),
                    if seg.tagged() {
                        " tagged"
                    } else {
                        "n untagged"
                    }
                ),
            )
        })?;
    Ok(if seg.tagged() {
        Header {
            last: seg.last(),
            opcode,
            stag: seg.stag(),
            offset: seg.tagged_offset(),
            queue: 0,
            msn: 0,
        }
    } else {
        Header {
            last: seg.last(),
            opcode,
            stag: seg.reserved_ulp(),
            offset: u64::from(seg.message_offset()),
            queue: seg.queue_number(),
            msn: seg.msn(),
        }
    })
}

/// Writes `data` at message offset `offset` of a receive's scatter list.
pub(super) fn scatter(
    memory: &dyn MemoryTable,
    work: &super::work::RecvWork,
    mut offset: u64,
    mut data: &[u8],
) -> Result<(), AccessError> {
    for s in &work.segments {
        if data.is_empty() {
            break;
        }
        let len = u64::from(s.length);
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = (len - offset).min(data.len() as u64) as usize;
        let region = memory.local(s.lkey).ok_or(AccessError::InvalidKey)?;
        region.write(
            s.addr.wrapping_add(offset),
            &data[..n],
            AccessFlags::LOCAL_WRITE,
        )?;
        data = &data[n..];
        offset = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(AccessError::OutOfBounds)
    }
}
