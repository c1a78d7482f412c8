//! Byte-for-byte checks of the WQE encodings against the layout in
//! docs/kernel-abi.md#rxe-work-queue-elements.

use super::*;
use rdmasock_verbs::{RemoteKey, WcFlags};

fn sges() -> [Sge; 2] {
    [
        Sge {
            addr: 0x1000_2000_3000,
            length: 16,
            lkey: 0x11,
        },
        Sge {
            addr: 0x4000,
            length: 8,
            lkey: 0x22,
        },
    ]
}

/// The expected header bytes, built independently field by field.
fn expected(
    wr_id: u64,
    opcode: u32,
    flags: u32,
    imm_be: [u8; 4],
    words: &[(usize, &[u8])],
) -> Vec<u8> {
    let mut e = vec![0u8; 256];
    e[0..8].copy_from_slice(&wr_id.to_le_bytes());
    e[8..12].copy_from_slice(&2u32.to_le_bytes());
    e[12..16].copy_from_slice(&opcode.to_le_bytes());
    e[16..20].copy_from_slice(&flags.to_le_bytes());
    e[20..24].copy_from_slice(&imm_be);
    for (at, bytes) in words {
        e[*at..*at + bytes.len()].copy_from_slice(bytes);
    }
    // dma: length 24, resid 24, num_sge 2
    e[184..188].copy_from_slice(&24u32.to_le_bytes());
    e[188..192].copy_from_slice(&24u32.to_le_bytes());
    e[196..200].copy_from_slice(&2u32.to_le_bytes());
    // SGEs at 208
    e[208..216].copy_from_slice(&0x1000_2000_3000u64.to_le_bytes());
    e[216..220].copy_from_slice(&16u32.to_le_bytes());
    e[220..224].copy_from_slice(&0x11u32.to_le_bytes());
    e[224..232].copy_from_slice(&0x4000u64.to_le_bytes());
    e[232..236].copy_from_slice(&8u32.to_le_bytes());
    e[236..240].copy_from_slice(&0x22u32.to_le_bytes());
    e
}

fn encoded(op: SendOp, flags: SendFlags) -> Vec<u8> {
    let list = sges();
    let wr = SendDescriptor {
        wr_id: 0xdead_beef_0000_0001,
        op,
        sges: &list,
        flags,
    };
    let mut buf = vec![0u8; 256];
    assert_eq!(send_len(2, None), 240);
    encode_send(&wr, None, &mut buf);
    buf
}

const WR_ID_VALUE: u64 = 0xdead_beef_0000_0001;
const ADDR: u64 = 0x7f00_1122_3344_5500;

#[test]
fn send_and_send_with_imm() {
    let got = encoded(SendOp::Send, SendFlags::SIGNALED);
    assert_eq!(got, expected(WR_ID_VALUE, 2, 2, [0; 4], &[]));
    let got = encoded(SendOp::SendWithImm(0x0102_0304), SendFlags::SIGNALED);
    assert_eq!(got, expected(WR_ID_VALUE, 3, 2, [1, 2, 3, 4], &[]));
}

#[test]
fn rdma_write_read_and_write_with_imm() {
    let rkey = RemoteKey(0xabcd);
    let a = ADDR.to_le_bytes();
    let k = 0xabcdu32.to_le_bytes();
    let fields: [(usize, &[u8]); 3] = [(24, &a), (32, &k), (152, &a)];
    let got = encoded(
        SendOp::RdmaWrite {
            remote_addr: ADDR,
            rkey,
        },
        SendFlags::empty(),
    );
    assert_eq!(got, expected(WR_ID_VALUE, 0, 0, [0; 4], &fields));
    let got = encoded(
        SendOp::RdmaWriteWithImm {
            remote_addr: ADDR,
            rkey,
            imm: 0xa0b0_c0d0,
        },
        SendFlags::SIGNALED,
    );
    assert_eq!(
        got,
        expected(WR_ID_VALUE, 1, 2, [0xa0, 0xb0, 0xc0, 0xd0], &fields)
    );
    let got = encoded(
        SendOp::RdmaRead {
            remote_addr: ADDR,
            rkey,
        },
        SendFlags::SIGNALED,
    );
    assert_eq!(got, expected(WR_ID_VALUE, 4, 2, [0; 4], &fields));
}

#[test]
fn atomics() {
    let rkey = RemoteKey(0x55);
    let a = ADDR.to_le_bytes();
    let cmp = 0x1111_2222_3333_4444u64.to_le_bytes();
    let swp = 0x5555_6666_7777_8888u64.to_le_bytes();
    let k = 0x55u32.to_le_bytes();
    let got = encoded(
        SendOp::AtomicCompareSwap {
            remote_addr: ADDR,
            rkey,
            compare: 0x1111_2222_3333_4444,
            swap: 0x5555_6666_7777_8888,
        },
        SendFlags::SIGNALED,
    );
    let f: [(usize, &[u8]); 5] = [(24, &a), (32, &cmp), (40, &swp), (48, &k), (152, &a)];
    assert_eq!(got, expected(WR_ID_VALUE, 5, 2, [0; 4], &f));
    let got = encoded(
        SendOp::AtomicFetchAdd {
            remote_addr: ADDR,
            rkey,
            add: 0x1111_2222_3333_4444,
        },
        SendFlags::SIGNALED,
    );
    let f: [(usize, &[u8]); 4] = [(24, &a), (32, &cmp), (48, &k), (152, &a)];
    assert_eq!(got, expected(WR_ID_VALUE, 6, 2, [0; 4], &f));
}

#[test]
fn every_flag_has_its_ib_bit() {
    for (flag, bit) in [
        (SendFlags::FENCE, 1u32),
        (SendFlags::SIGNALED, 2),
        (SendFlags::SOLICITED, 4),
        (SendFlags::INLINE, 8),
    ] {
        let got = encoded(SendOp::Send, flag);
        assert_eq!(got, expected(WR_ID_VALUE, 2, bit, [0; 4], &[]), "{flag:?}");
    }
    let all = SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED;
    assert_eq!(
        encoded(SendOp::Send, all),
        expected(WR_ID_VALUE, 2, 7, [0; 4], &[])
    );
}

#[test]
fn inline_payload_replaces_the_sge_array() {
    let list = sges();
    let wr = SendDescriptor {
        wr_id: 9,
        op: SendOp::Send,
        sges: &list,
        flags: SendFlags::INLINE | SendFlags::SIGNALED,
    };
    let payload: Vec<u8> = (0..24).collect();
    assert_eq!(send_len(2, Some(24)), 232);
    let mut buf = vec![0u8; 256];
    encode_send(&wr, Some(24), &mut buf);
    assert_eq!(
        &buf[208..],
        &[0u8; 48],
        "the caller gathers the payload itself"
    );
    buf[208..232].copy_from_slice(&payload);
    let mut e = vec![0u8; 256];
    e[0..8].copy_from_slice(&9u64.to_le_bytes());
    e[8..12].copy_from_slice(&2u32.to_le_bytes());
    e[12..16].copy_from_slice(&2u32.to_le_bytes());
    e[16..20].copy_from_slice(&10u32.to_le_bytes());
    e[184..188].copy_from_slice(&24u32.to_le_bytes());
    e[188..192].copy_from_slice(&24u32.to_le_bytes());
    e[196..200].copy_from_slice(&2u32.to_le_bytes());
    e[208..232].copy_from_slice(&payload);
    assert_eq!(buf, e);
}

#[test]
fn receive_wqe() {
    let list = sges();
    assert_eq!(recv_len(2), 72);
    let mut buf = vec![0u8; 80];
    encode_recv(0x77, &list, &mut buf);
    let mut e = vec![0u8; 80];
    e[0..8].copy_from_slice(&0x77u64.to_le_bytes());
    e[8..12].copy_from_slice(&2u32.to_le_bytes());
    e[16..20].copy_from_slice(&24u32.to_le_bytes());
    e[20..24].copy_from_slice(&24u32.to_le_bytes());
    e[28..32].copy_from_slice(&2u32.to_le_bytes());
    e[40..48].copy_from_slice(&0x1000_2000_3000u64.to_le_bytes());
    e[48..52].copy_from_slice(&16u32.to_le_bytes());
    e[52..56].copy_from_slice(&0x11u32.to_le_bytes());
    e[56..64].copy_from_slice(&0x4000u64.to_le_bytes());
    e[64..68].copy_from_slice(&8u32.to_le_bytes());
    e[68..72].copy_from_slice(&0x22u32.to_le_bytes());
    assert_eq!(buf, e);
}

#[test]
fn single_sge_requests() {
    // One entry takes its own path (no loop): the same bytes as the first of a list.
    let one = &sges()[..1];
    let mut buf = vec![0xffu8; 80];
    encode_recv(0x78, one, &mut buf);
    let mut e = [0u8; 56];
    e[0..8].copy_from_slice(&0x78u64.to_le_bytes());
    e[8..12].copy_from_slice(&1u32.to_le_bytes());
    e[16..20].copy_from_slice(&16u32.to_le_bytes());
    e[20..24].copy_from_slice(&16u32.to_le_bytes());
    e[28..32].copy_from_slice(&1u32.to_le_bytes());
    e[40..48].copy_from_slice(&0x1000_2000_3000u64.to_le_bytes());
    e[48..52].copy_from_slice(&16u32.to_le_bytes());
    e[52..56].copy_from_slice(&0x11u32.to_le_bytes());
    assert_eq!(buf[..56], e[..]);
    assert!(
        buf[56..].iter().all(|&b| b == 0xff),
        "past the entry untouched"
    );

    let wr = SendDescriptor {
        wr_id: 5,
        op: SendOp::Send,
        sges: one,
        flags: SendFlags::SIGNALED,
    };
    let mut buf = vec![0xffu8; 256];
    encode_send(&wr, None, &mut buf);
    assert_eq!(&buf[184..188], &16u32.to_le_bytes(), "dma length");
    assert_eq!(&buf[196..200], &1u32.to_le_bytes(), "dma num_sge");
    assert_eq!(&buf[208..216], &0x1000_2000_3000u64.to_le_bytes());
    assert_eq!(&buf[216..220], &16u32.to_le_bytes());
    assert_eq!(&buf[220..224], &0x11u32.to_le_bytes());
    assert!(
        buf[224..].iter().all(|&b| b == 0xff),
        "past the entry untouched"
    );
}

#[test]
fn cqe_decoding() {
    let mut b = [0u8; CQE_LEN];
    b[0..8].copy_from_slice(&0x1234u64.to_le_bytes());
    b[8..12].copy_from_slice(&10u32.to_le_bytes()); // REM_ACCESS_ERR
    b[12..16].copy_from_slice(&129u32.to_le_bytes());
    b[16..20].copy_from_slice(&0x99u32.to_le_bytes());
    b[20..24].copy_from_slice(&4096u32.to_le_bytes());
    b[24..28].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // imm, big-endian
    b[28..32].copy_from_slice(&0x11u32.to_le_bytes());
    b[32..36].copy_from_slice(&0x22u32.to_le_bytes());
    b[36..40].copy_from_slice(&2u32.to_le_bytes()); // kernel WITH_IMM
    b[40..42].copy_from_slice(&3u16.to_le_bytes());
    b[44] = 5;
    let wc = decode_cqe(rdmasock_verbs::__private::from_bytes(&b));
    assert_eq!(wc.wr_id, 0x1234);
    assert_eq!(wc.status, 10);
    assert_eq!(wc.opcode, 129);
    assert_eq!(wc.vendor_err, 0x99);
    assert_eq!(wc.byte_len, 4096);
    assert_eq!(wc.imm(), Some(0xdead_beef));
    assert!(wc.flags().contains(WcFlags::WITH_IMM));
    assert_eq!(wc.qp_num, QpNumber(0x11));
    assert_eq!(wc.src_qp, QpNumber(0x22));
    assert_eq!(wc.pkey_index, 3);
    assert_eq!(wc.sl, 5);
}

#[test]
fn encoding_over_a_used_slot_clears_the_header() {
    // A ring slot holds the previous lap's WQE: every header byte must be rewritten.
    let mut dirty = vec![0xa5u8; 256];
    let list = sges();
    let wr = SendDescriptor {
        wr_id: WR_ID_VALUE,
        op: SendOp::Send,
        sges: &list,
        flags: SendFlags::SIGNALED,
    };
    encode_send(&wr, None, &mut dirty);
    let clean = encoded(SendOp::Send, SendFlags::SIGNALED);
    assert_eq!(
        &dirty[..240],
        &clean[..240],
        "header and SGEs as on a zeroed slot"
    );
    assert_eq!(
        &dirty[240..],
        &[0xa5u8; 16],
        "bytes past the WQE are left alone"
    );

    let mut dirty = vec![0xa5u8; 80];
    encode_recv(0x77, &list, &mut dirty);
    let mut clean = vec![0u8; 80];
    encode_recv(0x77, &list, &mut clean);
    assert_eq!(&dirty[..72], &clean[..72]);
    assert_eq!(&dirty[72..], &[0xa5u8; 8]);
}
