//! The rdma-core bridge's structs against the installed `<infiniband/verbs.h>`: a small C
//! program is generated, compiled with gcc and run; it prints `sizeof`, `_Alignof` and
//! `offsetof` of every struct and field the bridge touches, and the constants whose values it
//! relies on, and each must equal the Rust value.
//!
//! Test-only tools: gcc and the headers of libibverbs-dev (`apt install libibverbs-dev gcc`).
//! Nothing links to libibverbs. Without the headers or gcc this test fails, saying what to
//! install.
#![forbid(unsafe_code)]

use rdmasock_ibverbs::__private::abi::*;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

/// `(C expression, Rust value)` pairs.
struct Checks(Vec<(String, usize)>);

impl Checks {
    fn add(&mut self, c: impl Into<String>, rust: usize) {
        self.0.push((c.into(), rust));
    }
}

/// Size, alignment and the offsets of same-named fields of one struct.
macro_rules! layout {
    ($checks:expr, $rust:ty, $c:literal $(, $field:ident)* $(,)?) => {{
        $checks.add(format!("sizeof({})", $c), size_of::<$rust>());
        $checks.add(format!("_Alignof({})", $c), align_of::<$rust>());
        $($checks.add(
            format!("offsetof({}, {})", $c, stringify!($field)),
            offset_of!($rust, $field),
        );)*
    }};
}

fn checks() -> Checks {
    let mut c = Checks(Vec::new());
    layout!(
        c,
        IbvContextOps,
        "struct ibv_context_ops",
        poll_cq,
        req_notify_cq,
        post_send,
        post_recv
    );
    layout!(
        c,
        IbvContext,
        "struct ibv_context",
        device,
        ops,
        cmd_fd,
        async_fd,
        num_comp_vectors,
        mutex,
        abi_compat
    );
    layout!(
        c,
        VerbsContext,
        "struct verbs_context",
        query_port,
        query_device_ex,
        sz,
        context
    );
    layout!(
        c,
        IbvDeviceAttrEx,
        "struct ibv_device_attr_ex",
        orig_attr,
        comp_mask,
        odp_caps,
        completion_timestamp_mask,
        hca_core_clock,
        device_cap_flags_ex,
        tso_caps,
        rss_caps,
        max_wq_type_rq,
        packet_pacing_caps,
        raw_packet_caps,
        tm_caps,
        cq_mod_caps,
        max_dm_size,
        pci_atomic_caps,
        xrc_odp_caps,
        phys_port_cnt_ex
    );
    layout!(c, IbvOdpCaps, "struct ibv_odp_caps", general_caps);
    for (field, rust) in [
        ("rc_odp_caps", offset_of!(IbvOdpCaps, rc_odp_caps)),
        ("uc_odp_caps", offset_of!(IbvOdpCaps, uc_odp_caps)),
        ("ud_odp_caps", offset_of!(IbvOdpCaps, ud_odp_caps)),
    ] {
        c.add(
            format!("offsetof(struct ibv_odp_caps, per_transport_caps.{field})"),
            rust,
        );
    }
    layout!(
        c,
        IbvTsoCaps,
        "struct ibv_tso_caps",
        max_tso,
        supported_qpts
    );
    layout!(
        c,
        IbvRssCaps,
        "struct ibv_rss_caps",
        supported_qpts,
        max_rwq_indirection_tables,
        max_rwq_indirection_table_size,
        rx_hash_fields_mask,
        rx_hash_function
    );
    layout!(
        c,
        IbvPacketPacingCaps,
        "struct ibv_packet_pacing_caps",
        qp_rate_limit_min,
        qp_rate_limit_max,
        supported_qpts
    );
    layout!(
        c,
        IbvTmCaps,
        "struct ibv_tm_caps",
        max_rndv_hdr_size,
        max_num_tags,
        flags,
        max_ops,
        max_sge
    );
    layout!(
        c,
        IbvCqModerationCaps,
        "struct ibv_cq_moderation_caps",
        max_cq_count,
        max_cq_period
    );
    layout!(
        c,
        IbvPciAtomicCaps,
        "struct ibv_pci_atomic_caps",
        fetch_add,
        swap,
        compare_swap
    );
    c.add(
        "offsetof(struct verbs_context, _ABI_placeholder3)",
        offset_of!(VerbsContext, _abi_placeholder3),
    );
    c.add("(size_t)__VERBS_ABI_IS_EXTENDED", VERBS_ABI_IS_EXTENDED);
    layout!(
        c,
        IbvDeviceAttr,
        "struct ibv_device_attr",
        fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_ee_rd_atom,
        max_res_rd_atom,
        max_qp_init_rd_atom,
        max_ee_init_rd_atom,
        atomic_cap,
        max_ee,
        max_rdd,
        max_mw,
        max_raw_ipv6_qp,
        max_raw_ethy_qp,
        max_mcast_grp,
        max_mcast_qp_attach,
        max_total_mcast_qp_attach,
        max_ah,
        max_fmr,
        max_map_per_fmr,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt,
    );
    layout!(
        c,
        IbvPortAttr,
        "struct ibv_port_attr",
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2,
    );
    layout!(c, IbvGid, "union ibv_gid", raw);
    layout!(c, IbvPd, "struct ibv_pd", context, handle);
    layout!(
        c,
        IbvMr,
        "struct ibv_mr",
        context,
        pd,
        addr,
        length,
        handle,
        lkey,
        rkey
    );
    layout!(
        c,
        IbvCompChannel,
        "struct ibv_comp_channel",
        context,
        fd,
        refcnt
    );
    layout!(
        c,
        IbvCq,
        "struct ibv_cq",
        context,
        channel,
        cq_context,
        handle,
        cqe,
        mutex,
        cond,
        comp_events_completed,
        async_events_completed,
    );
    layout!(
        c,
        IbvQp,
        "struct ibv_qp",
        context,
        qp_context,
        pd,
        send_cq,
        recv_cq,
        srq,
        handle,
        qp_num,
        state,
        qp_type,
        mutex,
        cond,
        events_completed,
    );
    layout!(
        c,
        IbvQpCap,
        "struct ibv_qp_cap",
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data
    );
    layout!(
        c,
        IbvQpInitAttr,
        "struct ibv_qp_init_attr",
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all
    );
    layout!(
        c,
        IbvGlobalRoute,
        "struct ibv_global_route",
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class
    );
    layout!(
        c,
        IbvAhAttr,
        "struct ibv_ah_attr",
        grh,
        dlid,
        sl,
        src_path_bits,
        static_rate,
        is_global,
        port_num
    );
    layout!(
        c,
        IbvQpAttr,
        "struct ibv_qp_attr",
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit,
    );
    layout!(c, IbvSge, "struct ibv_sge", addr, length, lkey);
    layout!(
        c,
        IbvSendWr,
        "struct ibv_send_wr",
        wr_id,
        next,
        sg_list,
        num_sge,
        opcode,
        send_flags,
        imm_data,
        wr,
        qp_type,
    );
    let wr = offset_of!(IbvSendWr, wr);
    for (c_field, rust) in [
        ("wr.rdma.remote_addr", offset_of!(IbvWr, remote_addr)),
        // wr.rdma.rkey overlays the first four bytes of wr.atomic.compare_add.
        ("wr.rdma.rkey", offset_of!(IbvWr, compare_add)),
        ("wr.atomic.remote_addr", offset_of!(IbvWr, remote_addr)),
        ("wr.atomic.compare_add", offset_of!(IbvWr, compare_add)),
        ("wr.atomic.swap", offset_of!(IbvWr, swap)),
        ("wr.atomic.rkey", offset_of!(IbvWr, rkey)),
    ] {
        c.add(
            format!("offsetof(struct ibv_send_wr, {c_field})"),
            wr + rust,
        );
    }
    c.add("sizeof(((struct ibv_send_wr *)0)->wr)", size_of::<IbvWr>());
    layout!(
        c,
        IbvRecvWr,
        "struct ibv_recv_wr",
        wr_id,
        next,
        sg_list,
        num_sge
    );
    layout!(
        c,
        IbvWc,
        "struct ibv_wc",
        wr_id,
        status,
        opcode,
        vendor_err,
        byte_len,
        imm_data,
        qp_num,
        src_qp,
        wc_flags,
        pkey_index,
        slid,
        sl,
        dlid_path_bits,
    );
    layout!(
        c,
        IbvAsyncEvent,
        "struct ibv_async_event",
        element,
        event_type
    );
    // Numbers the bridge passes through unchanged because they equal the kernel's (the
    // verbs layer's) values, and the two work completion flags it swaps.
    for (name, value) in [
        ("IBV_QPT_RC", IBV_QPT_RC as usize),
        ("IBV_WR_RDMA_WRITE", 0),
        ("IBV_WR_RDMA_WRITE_WITH_IMM", 1),
        ("IBV_WR_SEND", 2),
        ("IBV_WR_SEND_WITH_IMM", 3),
        ("IBV_WR_RDMA_READ", 4),
        ("IBV_WR_ATOMIC_CMP_AND_SWP", 5),
        ("IBV_WR_ATOMIC_FETCH_AND_ADD", 6),
        ("IBV_SEND_FENCE", 1),
        ("IBV_SEND_SIGNALED", 2),
        ("IBV_SEND_SOLICITED", 4),
        ("IBV_SEND_INLINE", 8),
        ("IBV_WC_RECV", 128),
        ("IBV_WC_RECV_RDMA_WITH_IMM", 129),
        ("IBV_WC_WITH_IMM", 2),
        ("IBV_WC_IP_CSUM_OK", 4),
        ("IBV_WC_WITH_INV", 8),
        ("IBV_WC_GENERAL_ERR", 21),
        ("IBV_QP_STATE", 1),
        ("IBV_QP_DEST_QPN", 1 << 20),
        ("IBV_ACCESS_REMOTE_ATOMIC", 8),
        ("IBV_QPS_ERR", 6),
        ("IBV_MTU_4096", 5),
        ("IBV_EVENT_QP_LAST_WQE_REACHED", 16),
        ("IBV_EVENT_WQ_FATAL", 19),
    ] {
        c.add(format!("(size_t){name}"), value);
    }
    c
}

fn c_program(checks: &Checks) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (expr, _) in &checks.0 {
        s.push_str(&format!("    printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    s.push_str("    return 0;\n}\n");
    s
}

#[test]
fn structs_match_the_installed_verbs_h() {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    assert!(
        header.is_file(),
        "{} is missing: this test checks the bridge's structs against rdma-core's headers; \
         install them with `apt install libibverbs-dev` (test-only; nothing links to libibverbs)",
        header.display()
    );
    let checks = checks();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi_ibverbs");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("layout.c");
    let binary = dir.join("layout");
    std::fs::write(&source, c_program(&checks)).unwrap();
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}): install it with `apt install gcc`"));
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&binary).output().unwrap();
    assert!(run.status.success(), "{} failed", binary.display());
    let values: Vec<usize> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(values.len(), checks.0.len());
    let wrong: Vec<String> = checks
        .0
        .iter()
        .zip(&values)
        .filter(|((_, rust), c)| *rust != **c)
        .map(|((expr, rust), c)| format!("{expr}: verbs.h says {c}, the bridge has {rust}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "the bridge's ABI differs from the installed verbs.h:\n{}",
        wrong.join("\n")
    );
    println!(
        "{} layout facts agree with {}",
        checks.0.len(),
        header.display()
    );
}
