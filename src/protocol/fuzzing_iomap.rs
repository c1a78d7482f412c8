//! The iomap fuzz entry point (`fuzz/fuzz_targets/stream_iomap.rs`, and seeded in
//! `tests/stream_fuzz_smoke.rs`): a hostile peer announces an iomap table of any size at any
//! address, writes anything into our table and announces any slot; the application maps,
//! unmaps and iowrites. Never a panic, and every RDMA WRITE the engine asks for lands inside
//! a window the peer's last checked entry describes (or inside the peer's table, for our
//! own entries).
#![forbid(unsafe_code)]

use super::{
    ByteOrder, Hello, IomapEntry, LocalRegions, Message, Op, Payload, Received, RemoteSge,
    StreamConfig, StreamEngine, StreamError, WrId, FLAG_IOMAP, IOMAP_ENTRY_LEN, TARGET_LIST_LEN,
};
use std::collections::VecDeque;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.iter_mut().for_each(|x| *x = self.byte());
        u64::from_le_bytes(b)
    }
}

/// What the driver knows: posted receives and sends, our target area as the peer wrote it,
/// and the windows the engine adopted (as far as it did not fail).
struct Driver {
    receives: VecDeque<WrId>,
    sends: VecDeque<WrId>,
    area: Vec<u8>,
    windows: Vec<Option<IomapEntry>>,
    peer_table: RemoteSge,
    /// The peer's target list (write+send mode's buffer updates are plain WRITEs there).
    peer_list: RemoteSge,
    order: ByteOrder,
}

impl Driver {
    fn take_ops(&mut self, e: &mut StreamEngine) {
        while let Some(op) = e.pop_op() {
            match op {
                Op::PostRecv { wr_id, .. } => self.receives.push_back(wr_id),
                Op::ClearTargetEntry { offset } => {
                    assert!(offset + 16 <= TARGET_LIST_LEN, "clearing past the list");
                    self.area[offset..offset + 16].fill(0);
                }
                Op::Write {
                    wr_id,
                    payload,
                    remote_addr,
                    rkey,
                    ..
                } => {
                    self.sends.push_back(wr_id);
                    self.check_window_write(remote_addr, rkey, payload.len() as u64);
                }
                Op::WriteWithImm {
                    wr_id,
                    payload,
                    remote_addr,
                    rkey,
                    imm,
                    ..
                } => {
                    self.sends.push_back(wr_id);
                    if let Message::IomapSgl(index) = Message::decode(imm) {
                        self.check_table_write(index, remote_addr, rkey, payload);
                    }
                }
                Op::Send { wr_id, .. } => self.sends.push_back(wr_id),
                // A placement fence (a one-byte READ) completes like a send.
                Op::Read { wr_id, .. } => self.sends.push_back(wr_id),
            }
        }
    }

    /// A plain WRITE with bytes is an iowrite, inside a window the engine adopted, or (in
    /// write+send mode, where control goes as a plain WRITE and a SEND) our entry, inside
    /// the peer's table, or a buffer update, inside the peer's target list. (This script
    /// writes no stream data; a keepalive carries no bytes.)
    fn check_window_write(&self, addr: u64, rkey: u32, len: u64) {
        if len == 0 {
            return;
        }
        let in_window = self.windows.iter().flatten().any(|w| {
            w.window.key == rkey
                && addr >= w.window.addr
                && addr - w.window.addr + len <= u64::from(w.window.length)
        });
        let table = self.peer_table;
        let in_table = rkey == table.key
            && addr >= table.addr
            && addr - table.addr + len <= IOMAP_ENTRY_LEN as u64 * u64::from(table.length);
        let list = self.peer_list;
        let in_list = rkey == list.key
            && addr >= list.addr
            && addr - list.addr + len <= u64::from(list.length);
        assert!(
            in_window || in_table || in_list,
            "a WRITE of {len} bytes at {addr:#x} key {rkey:#x} is outside every window"
        );
    }

    fn check_table_write(&self, index: u32, addr: u64, rkey: u32, payload: Payload) {
        let table = self.peer_table;
        assert!(
            index < table.length,
            "slot {index} of a {}-entry table",
            table.length
        );
        assert_eq!(rkey, table.key, "an entry goes with the table's key");
        assert_eq!(addr, table.addr + IOMAP_ENTRY_LEN as u64 * u64::from(index));
        assert_eq!(payload.len(), IOMAP_ENTRY_LEN);
    }
}

/// How far a script got, for the seeded smoke test's aim.
#[derive(Debug, Default, Clone, Copy)]
pub struct IomapReached {
    /// Entries of ours the engine adopted as windows.
    pub windows_adopted: usize,
    /// Bytes the application iowrote.
    pub bytes_iowritten: usize,
    /// Iowrites refused as outside every window.
    pub refused: usize,
    /// Our own windows' entries sent to the peer.
    pub entries_sent: usize,
}

/// Drives one engine with an iomap table against a hostile peer (see the module text).
pub fn iomap(data: &[u8]) -> IomapReached {
    let mut reached = IomapReached::default();
    let mut input = Input(data);
    let pick = input.byte();
    let order = if pick & 1 != 0 {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
    let size = [1u16, 2, 4, 129, 300][usize::from(pick >> 1 & 7) % 5];
    let cfg = StreamConfig::builder()
        .write_with_send(pick & 0x40 != 0)
        .byte_order(order)
        .send_ring(8192)
        .recv_ring(8192)
        .send_queue_depth(16)
        .recv_queue_depth(16)
        .max_transfer(4096)
        .iomap_size(size)
        .build()
        .expect("a valid configuration");
    let local = LocalRegions {
        recv_ring_addr: 0x10_0000,
        recv_ring_rkey: 0x11,
        target_list_addr: 0x20_0000,
        target_list_rkey: 0x22,
    };
    let mut e = StreamEngine::new(cfg.clone(), local);
    let mut d = Driver {
        receives: VecDeque::new(),
        sends: VecDeque::new(),
        area: vec![0; cfg.target_area_len()],
        windows: vec![None; usize::from(cfg.iomap_size())],
        peer_table: RemoteSge::default(),
        peer_list: RemoteSge::default(),
        order,
    };
    d.take_ops(&mut e);
    let mut peer = e.hello();
    peer.flags = FLAG_IOMAP | (input.byte() & 1);
    peer.target_iomap_size = input.byte();
    peer.target_sgl.addr = if input.byte() & 1 != 0 {
        u64::MAX - u64::from(input.u16()) * 16 - 64
    } else {
        u64::from(input.u16()) << 8
    };
    let Ok(peer) = Hello::parse(&peer.to_bytes()) else {
        return reached;
    };
    if e.on_connected(&peer).is_err() {
        return reached;
    }
    d.peer_list = RemoteSge::new(peer.target_sgl.addr, peer.target_sgl.key, 32);
    d.peer_table = RemoteSge::new(
        peer.target_sgl.addr + 32,
        peer.target_sgl.key,
        u32::from(e.iomap_peer_size()),
    );
    d.take_ops(&mut e);
    let mut slots = Vec::new();
    while !input.0.is_empty() {
        match input.byte() % 8 {
            0 => {
                // The peer writes anything into our table.
                let at = usize::from(input.u16()) % d.area.len();
                let n = usize::from(input.byte()) % (d.area.len() - at + 1);
                for b in &mut d.area[at..at + n] {
                    *b = input.byte();
                }
            }
            1 | 2 => {
                // The peer announces a slot (mostly one that exists).
                let Some(wr_id) = d.receives.pop_front() else {
                    continue;
                };
                let index = if input.byte() & 7 == 0 {
                    u32::from(input.u16())
                } else {
                    u32::from(input.byte()) % u32::from(size)
                };
                let word = Message::IomapSgl(index).encode();
                let received = if cfg.write_with_send() {
                    Received::Message(order.word_bytes(word))
                } else {
                    Received::Immediate(word)
                };
                let failed = e.error().is_some();
                e.on_receive(wr_id, received, &d.area[..TARGET_LIST_LEN]);
                while let Some(i) = e.take_iomap_update() {
                    let at = StreamEngine::iomap_entry_offset(i);
                    let bytes: [u8; IOMAP_ENTRY_LEN] = d.area[at..at + IOMAP_ENTRY_LEN]
                        .try_into()
                        .expect("24 bytes");
                    e.on_iomap_entry(i, &bytes);
                    if e.error().is_none() {
                        let entry = IomapEntry::decode(&bytes, d.order).expect("24 bytes");
                        d.windows[usize::from(i)] = (entry.window.length != 0).then_some(entry);
                        reached.windows_adopted += usize::from(entry.window.length != 0);
                    }
                }
                if !failed && index >= u32::from(size) {
                    assert!(
                        e.error().is_some(),
                        "slot {index} beyond the table is refused"
                    );
                }
            }
            3 => {
                // The application iowrites somewhere, mostly near a window.
                let len = usize::from(input.u16()) % 9000;
                let near = d.windows.iter().flatten().next().map_or(0, |w| w.offset);
                let offset = near.wrapping_add(u64::from(input.u16())).wrapping_sub(64);
                let offset = if input.byte() & 3 == 0 {
                    input.u64()
                } else {
                    offset
                };
                // As the driver does: a lone small one goes inline at once.
                if let Some(w) = e.iowrite_inline(offset, len) {
                    d.sends.push_back(w.wr_id);
                    d.check_window_write(w.remote_addr, w.rkey, len as u64);
                    reached.bytes_iowritten += len;
                    continue;
                }
                match e.iowrite(offset, len, |_| {}) {
                    Ok(n) => {
                        assert!(n <= len);
                        reached.bytes_iowritten += n;
                    }
                    Err(StreamError::Iomap(m)) => {
                        assert!(!m.is_empty());
                        reached.refused += 1;
                    }
                    Err(_) => {}
                }
            }
            4 => {
                if let Ok(slot) = e.iomap_reserve() {
                    if e.iomap_send(slot, |_| {}).is_ok() {
                        slots.push(slot);
                        reached.entries_sent += 1;
                    } else {
                        e.iomap_release(slot);
                    }
                }
            }
            5 => {
                if let Some(slot) = slots.pop() {
                    let _ = e.iomap_unmap(slot, |_| {});
                }
            }
            6 => {
                // Every posted send completes.
                while let Some(wr_id) = d.sends.pop_front() {
                    e.on_send_completion(wr_id, true);
                }
            }
            _ => {
                // A credit update from the peer.
                let Some(wr_id) = d.receives.pop_front() else {
                    continue;
                };
                let word = Message::Sgl(u32::from(input.u16())).encode();
                let received = if cfg.write_with_send() {
                    Received::Message(order.word_bytes(word))
                } else {
                    Received::Immediate(word)
                };
                e.on_receive(wr_id, received, &d.area[..TARGET_LIST_LEN]);
            }
        }
        d.take_ops(&mut e);
        let _ = e.readiness();
    }
    reached
}
