//! The kernel's `ib_uverbs_qp_attr` (INIT_QP_ATTR's answer) as the verbs layer's
//! [`QpAttributes`] and [`QpAttrMask`], per kernel-abi.md §1.8's translation table.
//!
//! The mask is cut to bits 0..20 (old kernels set the RoCE SMAC/VID bits 21–24, and the legacy
//! MODIFY_QP refuses anything above 20) and never carries `IB_QP_CAP`.

use super::abi::{AhAttr, UverbsQpAttr};
use rdmasock_verbs::qp_attr::{AddressVector, GlobalRoute, QpAttrMask, QpAttributes};
use rdmasock_verbs::{AccessFlags, Gid, Mtu, Psn, QpNumber, QpState};

/// The mask bits MODIFY_QP (legacy write) accepts.
pub const MODIFY_MASK_BITS: u32 = 0x1f_ffff;

fn address_vector(ah: &AhAttr) -> AddressVector {
    AddressVector {
        grh: (ah.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(ah.grh.dgid),
            flow_label: ah.grh.flow_label,
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
        }),
        dlid: ah.dlid,
        sl: ah.sl,
        src_path_bits: ah.src_path_bits,
        static_rate: ah.static_rate,
        port_num: ah.port_num,
    }
}

/// Converts INIT_QP_ATTR's answer. States or MTUs the verbs layer does not know (never sent by
/// a sane kernel) fall back to RESET / 1024 and are reported by the returned `Err` text.
pub fn to_verbs(raw: &UverbsQpAttr) -> Result<(QpAttributes, QpAttrMask), String> {
    let mask =
        QpAttrMask::from_bits_truncate(raw.qp_attr_mask & MODIFY_MASK_BITS) - QpAttrMask::CAP;
    let state = |v: u32, what: &str| {
        QpState::from_raw(v).ok_or_else(|| format!("INIT_QP_ATTR returned unknown {what} {v}"))
    };
    let qp_state = state(raw.qp_state, "qp_state")?;
    let cur_qp_state = if mask.contains(QpAttrMask::CUR_STATE) {
        state(raw.cur_qp_state, "cur_qp_state")?
    } else {
        QpState::Reset
    };
    let path_mtu = match Mtu::from_raw(raw.path_mtu) {
        Some(m) => m,
        None if mask.contains(QpAttrMask::PATH_MTU) => {
            return Err(format!(
                "INIT_QP_ATTR returned unknown path_mtu {}",
                raw.path_mtu
            ))
        }
        None => Mtu::Mtu1024,
    };
    let attr = QpAttributes {
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state: raw.path_mig_state as u8,
        qkey: raw.qkey,
        rq_psn: Psn(raw.rq_psn),
        sq_psn: Psn(raw.sq_psn),
        dest_qp_num: QpNumber(raw.dest_qp_num),
        qp_access_flags: AccessFlags::from_bits_truncate(raw.qp_access_flags),
        ah_attr: address_vector(&raw.ah_attr),
        alt_ah_attr: address_vector(&raw.alt_ah_attr),
        pkey_index: raw.pkey_index,
        alt_pkey_index: raw.alt_pkey_index,
        en_sqd_async_notify: raw.en_sqd_async_notify,
        sq_draining: raw.sq_draining,
        max_rd_atomic: raw.max_rd_atomic,
        max_dest_rd_atomic: raw.max_dest_rd_atomic,
        min_rnr_timer: raw.min_rnr_timer,
        port_num: raw.port_num,
        timeout: raw.timeout,
        retry_cnt: raw.retry_cnt,
        rnr_retry: raw.rnr_retry,
        alt_port_num: raw.alt_port_num,
        alt_timeout: raw.alt_timeout,
        ..QpAttributes::default()
    };
    Ok((attr, mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::Pod;

    #[test]
    fn rtr_on_roce() {
        let mut raw = UverbsQpAttr::zeroed();
        // STATE | AV | PATH_MTU | RQ_PSN | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC | DEST_QPN,
        // plus an old kernel's SMAC bit (21) that must be dropped.
        raw.qp_attr_mask = 1 | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20 | 1 << 21;
        raw.qp_state = 2;
        raw.path_mtu = 3;
        raw.rq_psn = 0x12_3456;
        raw.dest_qp_num = 0x11;
        raw.max_dest_rd_atomic = 16;
        raw.ah_attr.is_global = 1;
        raw.ah_attr.grh.dgid[10] = 0xff;
        raw.ah_attr.grh.dgid[11] = 0xff;
        raw.ah_attr.grh.sgid_index = 1;
        raw.ah_attr.grh.hop_limit = 64;
        raw.ah_attr.port_num = 1;
        let (a, m) = to_verbs(&raw).unwrap();
        assert_eq!(
            m,
            QpAttrMask::required_rc(QpState::Init, QpState::ReadyToReceive).unwrap()
        );
        assert_eq!(a.qp_state, QpState::ReadyToReceive);
        assert_eq!(a.path_mtu, Mtu::Mtu1024);
        assert_eq!(a.rq_psn, Psn(0x12_3456));
        assert_eq!(a.dest_qp_num, QpNumber(0x11));
        assert_eq!(a.max_dest_rd_atomic, 16);
        let grh = a.ah_attr.grh.expect("RoCE has a GRH");
        assert_eq!(grh.sgid_index, 1);
        assert_eq!(grh.hop_limit, 64);
        assert_eq!(grh.dgid.0[10], 0xff);
        assert_eq!(a.ah_attr.port_num, 1);
    }

    #[test]
    fn init_access_and_bad_state() {
        let mut raw = UverbsQpAttr::zeroed();
        raw.qp_attr_mask = 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 19;
        raw.qp_state = 1;
        raw.qp_access_flags = 2 | 4;
        raw.port_num = 1;
        let (a, m) = to_verbs(&raw).unwrap();
        assert!(!m.contains(QpAttrMask::CAP));
        assert_eq!(
            a.qp_access_flags,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
        );
        assert!(a.ah_attr.grh.is_none());
        raw.qp_state = 9;
        assert!(to_verbs(&raw).unwrap_err().contains("qp_state 9"));
    }
}
