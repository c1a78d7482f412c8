//! Byte-for-byte checks of the element encodings against the layouts in `siw-abi.h`
//! (docs/kernel-abi.md#siw-elements),
//! the expected bytes built independently field by field.

use super::*;
use rdmasock_verbs::RemoteKey;

const WR_ID: u64 = 0xdead_beef_0000_0001;
const ADDR: u64 = 0x7f00_1122_3344_5500;
const RKEY: RemoteKey = RemoteKey(0x00ab_cd42);

fn sges() -> [Sge; 3] {
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
        Sge {
            addr: 0x5_0000_0008,
            length: 0x1_0000,
            lkey: 0x3303,
        },
    ]
}

/// An SQE as the kernel's `struct siw_sqe` lays it out, flags left 0.
fn expected_sqe(opcode: u8, num_sge: u8, rkey: u32, raddr: u64, sge_area: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; SQE_LEN];
    e[0..8].copy_from_slice(&WR_ID.to_le_bytes());
    e[10] = num_sge;
    e[11] = opcode;
    e[12..16].copy_from_slice(&rkey.to_le_bytes());
    e[16..24].copy_from_slice(&raddr.to_le_bytes());
    e[24..24 + sge_area.len()].copy_from_slice(sge_area);
    e
}

/// `struct siw_sge` entries back to back.
fn sge_bytes(list: &[Sge]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in list {
        v.extend_from_slice(&s.addr.to_le_bytes());
        v.extend_from_slice(&s.length.to_le_bytes());
        v.extend_from_slice(&s.lkey.to_le_bytes());
    }
    v
}

fn encode(op: SendOp, flags: SendFlags, list: &[Sge], inline: Option<&[u8]>) -> (Vec<u8>, u16) {
    let wr = SendDescriptor {
        wr_id: WR_ID,
        op,
        flags,
        signal_all: false,
        sges: list,
    };
    let mut buf = vec![0u8; SQE_LEN];
    let f = encode_sqe(&wr, inline, &mut buf);
    (buf, f)
}

#[test]
fn element_sizes() {
    assert_eq!((SQE_LEN, RQE_LEN, CQE_LEN, CQ_CTRL_LEN), (120, 112, 32, 8));
    assert_eq!(SQE_INLINE, 40, "inline data starts at &sge[1]");
    assert_eq!(
        SQE_SGE + MAX_SGE * SGE_LEN,
        SQE_LEN,
        "six SGEs fill the SQE"
    );
    assert_eq!(
        RQE_SGE + MAX_SGE * SGE_LEN,
        RQE_LEN,
        "six SGEs fill the RQE"
    );
    assert_eq!(
        SQE_INLINE + MAX_INLINE,
        SQE_LEN,
        "80 inline bytes fill sge[1..6]"
    );
}

#[test]
fn send_with_a_scatter_list() {
    let list = sges();
    let (got, f) = encode(SendOp::Send, SendFlags::SIGNALED, &list, None);
    assert_eq!(got, expected_sqe(3, 3, 0, 0, &sge_bytes(&list)));
    assert_eq!(f, flags::VALID | flags::SIGNALLED);
}

#[test]
fn rdma_write_and_read() {
    let list = sges();
    let write = SendOp::RdmaWrite {
        remote_addr: ADDR,
        rkey: RKEY,
    };
    let (got, f) = encode(write, SendFlags::SIGNALED, &list[..2], None);
    assert_eq!(
        got,
        expected_sqe(0, 2, RKEY.0, ADDR, &sge_bytes(&list[..2]))
    );
    assert_eq!(f, flags::VALID | flags::SIGNALLED);
    let read = SendOp::RdmaRead {
        remote_addr: ADDR + 8,
        rkey: RKEY,
    };
    let (got, f) = encode(read, SendFlags::empty(), &list[2..], None);
    assert_eq!(
        got,
        expected_sqe(1, 1, RKEY.0, ADDR + 8, &sge_bytes(&list[2..]))
    );
    assert_eq!(f, flags::VALID, "unsignaled");
}

#[test]
fn inline_send_and_write_carry_the_payload_at_sge1() {
    let list = sges();
    let payload: Vec<u8> = (1..=80).collect();
    let (got, f) = encode(SendOp::Send, SendFlags::INLINE, &list[..2], Some(&payload));
    // sge[0]: laddr 0, length = total, lkey 0; then the bytes.
    let mut area = vec![0u8; 16];
    area[8..12].copy_from_slice(&80u32.to_le_bytes());
    area.extend_from_slice(&payload);
    assert_eq!(got, expected_sqe(3, 1, 0, 0, &area));
    assert_eq!(f, flags::VALID | flags::INLINE);
    let write = SendOp::RdmaWrite {
        remote_addr: ADDR,
        rkey: RKEY,
    };
    let (got, f) = encode(
        write,
        SendFlags::INLINE | SendFlags::SIGNALED,
        &list[..1],
        Some(b"abc"),
    );
    let mut area = vec![0u8; 16];
    area[8..12].copy_from_slice(&3u32.to_le_bytes());
    area.extend_from_slice(b"abc");
    assert_eq!(got, expected_sqe(0, 1, RKEY.0, ADDR, &area));
    assert_eq!(f, flags::VALID | flags::INLINE | flags::SIGNALLED);
}

#[test]
fn every_flag_maps_to_its_bit() {
    let list = sges();
    let cases = [
        (SendFlags::empty(), flags::VALID),
        (SendFlags::SIGNALED, flags::VALID | 4),
        (SendFlags::SOLICITED, flags::VALID | 8),
        (SendFlags::FENCE, flags::VALID | 16),
        (
            SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE,
            flags::VALID | 4 | 8 | 16,
        ),
    ];
    for (verbs, siw) in cases {
        let (_, f) = encode(SendOp::Send, verbs, &list, None);
        assert_eq!(f, siw, "{verbs:?}");
    }
    let (_, f) = encode(
        SendOp::Send,
        SendFlags::INLINE | SendFlags::SOLICITED,
        &list,
        Some(b"x"),
    );
    assert_eq!(f, 1 | 2 | 8);
    // sq_sig_all signals an unsignaled request.
    let wr = SendDescriptor {
        wr_id: 1,
        op: SendOp::Send,
        flags: SendFlags::empty(),
        signal_all: true,
        sges: &list,
    };
    assert_eq!(send_flags(&wr, false), flags::VALID | flags::SIGNALLED);
}

#[test]
fn unsupported_opcodes_have_no_siw_code() {
    assert_eq!(send_opcode(&SendOp::SendWithImm(1)), None);
    let write_imm = SendOp::RdmaWriteWithImm {
        remote_addr: ADDR,
        rkey: RKEY,
        imm: 1,
    };
    assert_eq!(send_opcode(&write_imm), None);
    let cas = SendOp::AtomicCompareSwap {
        remote_addr: ADDR,
        rkey: RKEY,
        compare: 1,
        swap: 2,
    };
    assert_eq!(send_opcode(&cas), None);
    let add = SendOp::AtomicFetchAdd {
        remote_addr: ADDR,
        rkey: RKEY,
        add: 1,
    };
    assert_eq!(send_opcode(&add), None);
}

#[test]
fn receive_element() {
    let list = sges();
    let mut buf = vec![0u8; RQE_LEN];
    assert_eq!(encode_rqe(WR_ID, &list, &mut buf), flags::VALID);
    let mut e = vec![0u8; RQE_LEN];
    e[0..8].copy_from_slice(&WR_ID.to_le_bytes());
    e[10] = 3;
    e[16..16 + 48].copy_from_slice(&sge_bytes(&list));
    assert_eq!(buf, e);
    let mut empty = vec![0u8; RQE_LEN];
    encode_rqe(7, &[], &mut empty);
    assert_eq!(&empty[..8], &7u64.to_le_bytes());
    assert!(
        empty[8..].iter().all(|&b| b == 0),
        "no SGEs, flags left to the ring"
    );
}

fn cqe(opcode: u8, status: u16, bytes: u32, qp_id: u64) -> [u8; CQE_LEN] {
    let mut c = [0u8; CQE_LEN];
    c[0..8].copy_from_slice(&WR_ID.to_le_bytes());
    c[8] = 1;
    c[9] = opcode;
    c[10..12].copy_from_slice(&status.to_le_bytes());
    c[12..16].copy_from_slice(&bytes.to_le_bytes());
    c[24..32].copy_from_slice(&qp_id.to_le_bytes());
    c
}

#[test]
fn completions_decode_opcode_status_length_and_qp() {
    for (code, wc) in [
        (0, WcOpcode::RdmaWrite),
        (1, WcOpcode::RdmaRead),
        (2, WcOpcode::RdmaRead),
        (3, WcOpcode::Send),
        (4, WcOpcode::Send),
        (5, WcOpcode::Send),
        (8, WcOpcode::Recv),
    ] {
        let w = decode_cqe(&cqe(code, 0, 4242, 0x17));
        assert_eq!(w.opcode(), wc, "siw opcode {code}");
        assert_eq!(w.status(), WcStatus::Success);
        assert_eq!(
            (w.wr_id, w.byte_len, w.qp_num),
            (WR_ID, 4242, QpNumber(0x17))
        );
        assert_eq!((w.vendor_err, w.imm(), w.wc_flags), (0, None, 0));
    }
    assert_eq!(
        decode_cqe(&cqe(9, 0, 0, 1)).opcode(),
        WcOpcode::Unknown(0x109),
        "an internal opcode never aliases a verbs one"
    );
}

#[test]
fn every_status_maps_like_the_kernel_table() {
    let table = [
        (0u16, 0u32),
        (1, 1),
        (2, 4),
        (3, 2),
        (4, 5),
        (5, 7),
        (6, 8),
        (7, 10),
        (8, 9),
        (9, 21),
        (10, 21),
        (0xffff, 21),
    ];
    for (siw, verbs) in table {
        let w = decode_cqe(&cqe(0, siw, 0, 1));
        assert_eq!(w.status, verbs, "siw status {siw}");
        let vendor = if siw == 0 { 0 } else { u32::from(siw) };
        assert_eq!(w.vendor_err, vendor);
    }
    let w = decode_cqe(&cqe(0, 7, 0, 1));
    assert_eq!(w.status().text(), "remote access error");
}
